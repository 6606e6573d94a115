// One ES module for componentize-js, which resolves no packages itself: the component
// entry with @capstan/sdk (from node_modules) bundled in.
export default {
  input: 'src/component.js',
  // The host's interface is the component's import, wired by componentize-js.
  external: [/^capstan:/],
  platform: 'neutral',
  output: { file: 'build/{{name}}.bundle.js', format: 'esm', codeSplitting: false },
};
