use clap::Parser as _;

fn main() {
    let cli = tierscope::cli::Cli::parse();
    tierscope::logging::init_stderr();
    match tierscope::commands::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // One line: the cause chain, outermost first.
            eprintln!("tierscope: error: {e:#}");
            std::process::exit(1);
        }
    }
}
