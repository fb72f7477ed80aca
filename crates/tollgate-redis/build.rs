//! Lists the policy Lua files for `src/policies.rs`: every
//! `src/scripts/policies/*.lua` whose first line is
//! `-- redis-policy: <name> code=<code> format=<n> bound=<Bound constant>`
//! becomes one line of the `redis_policies!` call, so that adding a policy
//! to the Redis store is adding its Lua file.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = Path::new("src/scripts/policies");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/scripts/policies")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .collect();
    files.sort();
    let mut lines = String::from("redis_policies! {\n");
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(path).expect("read a policy file");
        let header = text.lines().next().unwrap_or_default();
        let declared = header.strip_prefix("-- redis-policy: ").unwrap_or_else(|| {
            panic!(
                "{}: the first line must be `-- redis-policy: <name> code=<code> format=<n> bound=<Bound constant>`",
                path.display()
            )
        });
        let mut words = declared.split_whitespace();
        let name = words.next().expect("a policy name");
        let field = |key: &str| {
            declared
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("{}: no {key}= on the first line", path.display()))
                .to_owned()
        };
        let (code, format, bound) = (field("code"), field("format"), field("bound"));
        let absolute = std::fs::canonicalize(path).expect("canonical path");
        writeln!(
            lines,
            "    {name:?} => {{ code: {code:?}, format: {format}, lua: include_str!({:?}), bound: Bound::{bound} }},",
            absolute.display().to_string()
        )
        .expect("write to a string");
    }
    lines.push_str("}\n");
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(Path::new(&out).join("policies.rs"), lines).expect("write policies.rs");
}
