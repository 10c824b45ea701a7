//! Generates the raw bindings from the installed headers (Debian: librbd-dev, librados-dev),
//! so that they always match the library the target links against.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rustc-link-lib=rbd");
    println!("cargo:rustc-link-lib=rados");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("rbd_.*")
        .allowlist_function("rados_.*")
        .allowlist_type("rbd_.*")
        .allowlist_type("rados_.*")
        .allowlist_var("RBD_.*")
        .allowlist_var("LIBRADOS_.*")
        .allowlist_var("LIBRBD_.*")
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate();
    match bindings {
        Ok(b) => b
            .write_to_file(out.join("bindings.rs"))
            .expect("cannot write the bindings"),
        Err(e) => panic!(
            "cannot generate librbd bindings ({e}): are librbd-dev and librados-dev installed?"
        ),
    }
}
