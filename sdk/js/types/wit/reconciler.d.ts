/// <reference path="./interfaces/capstan-reconciler-host.d.ts" />
/// <reference path="./interfaces/capstan-reconciler-plugin.d.ts" />
/// <reference path="./interfaces/capstan-reconciler-types.d.ts" />
declare module 'capstan:reconciler/reconciler@0.3.0' {
  export type * as CapstanReconcilerHost020 from 'capstan:reconciler/host@0.3.0'; // import capstan:reconciler/host@0.3.0
  export type * as CapstanReconcilerTypes020 from 'capstan:reconciler/types@0.3.0'; // import capstan:reconciler/types@0.3.0
  export * as plugin from 'capstan:reconciler/plugin@0.3.0'; // export capstan:reconciler/plugin@0.3.0
}
