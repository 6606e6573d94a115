// The host allocates a JSON tree per object per reconcile; mimalloc does that markedly
// faster than glibc's allocator and far faster than musl's, which the static image uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    capstan::cli::main()
}
