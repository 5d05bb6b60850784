//! Fuzz targets for memlint: one per frontend (Python, shell, YAML, JSON, TOML) and one for the fix
//! engine. See `README.md` for how to run them with cargo-fuzz (nightly) or the stable driver.

pub mod checks;
