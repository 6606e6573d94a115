//! Tests that need no cluster: the `capstan` binary, the sandbox and its budgets against
//! hostile plugins, plugins in other languages, `capstan new` and `capstan import`, the
//! chart as `helm template` renders it, the book and the generated reference pages, and
//! the host's module structure.
//! One test binary, one module per area (`cargo test --test offline -- sandbox::`).

mod budgets;
mod cli;
mod docs;
mod helm_render;
mod hostile;
mod import;
mod new;
mod polyglot;
mod reference;
mod reuse;
mod sandbox;
mod structure;
