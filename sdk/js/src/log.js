// Logging through the host, which adds the plugin's name and the object's key. Natively
// (node --test) lines go to stderr; the Wasm adapter points them at `host.log`.

let sink = (level, message) => console.error(`[${level}] ${message}`);

/** Send log lines to `write(level, message)` instead; used by the Wasm adapter. */
export function setLogSink(write) {
  sink = write;
}

/** @param {'trace' | 'debug' | 'info' | 'warn' | 'error'} level */
export function log(level, message) {
  sink(level, String(message));
}

export const trace = (message) => log('trace', message);
export const debug = (message) => log('debug', message);
export const info = (message) => log('info', message);
export const warn = (message) => log('warn', message);
export const error = (message) => log('error', message);
