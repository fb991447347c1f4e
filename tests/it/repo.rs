//! The repository around the code: every `just` recipe says what it does (`just --list`
//! shows that line), what `just sandbox` writes is not committed by accident, and the README
//! says what a build needs and how to get `just`.

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{name}")).unwrap()
}

#[test]
fn every_recipe_is_described() {
    let justfile = read("Justfile");
    let lines: Vec<&str> = justfile.lines().collect();
    let mut recipes = 0;
    for (i, l) in lines.iter().enumerate() {
        // A recipe header: a name at the start of the line, then parameters, then ':'.
        let is_recipe = l.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && l.trim_end().ends_with(':')
            && !l.contains(":=");
        if !is_recipe {
            continue;
        }
        recipes += 1;
        let doc = i.checked_sub(1).map(|j| lines[j]).unwrap_or("");
        assert!(
            doc.starts_with("# ") && doc.len() > 10,
            "recipe {l:?} has no description line above it (`just --list` shows that line)"
        );
    }
    assert!(recipes >= 10, "{recipes} recipes found");
}

#[test]
fn sandbox_kubeconfig_is_ignored() {
    let ignore = read(".gitignore");
    assert!(ignore
        .lines()
        .any(|l| l == "/sandbox.kubeconfig" || l == "sandbox.kubeconfig"));
    assert!(read("Justfile").contains("--kubeconfig-out sandbox.kubeconfig"));
}

#[test]
fn readme_says_what_a_build_needs() {
    let readme = read("README.md");
    assert!(readme.contains("C compiler"), "ring's C code needs one");
    assert!(readme.contains("cargo install just --locked"));
}
