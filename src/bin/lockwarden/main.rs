//! The `lockwarden` operator command (being built: see issue 6).

fn main() {
    eprintln!("lockwarden: not built yet");
    std::process::exit(2);
}
