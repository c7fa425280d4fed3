use which::which;

/// Rebuild when bpf-linker changes (aya-template does the same): cargo does not track linkers.
fn main() {
    if let Ok(bpf_linker) = which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", bpf_linker.display());
    }
}
