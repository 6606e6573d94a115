fn main() -> std::process::ExitCode {
    capstan::cli::main()
}
