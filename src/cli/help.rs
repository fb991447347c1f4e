//! `edgekcm --help`.

use super::flags::{not_acted_on_yet, ACTED, GENERIC};
use crate::config::CONCURRENT_SYNCS;
use crate::controllers::registry;

/// `--help` output: the flags edgekcm acts on, grouped, with defaults.
pub fn help_text() -> String {
    let mut out = String::new();
    out.push_str(
        "edgekcm runs the Kubernetes controllers (a kube-controller-manager v1.37 compatible\n\
         controller manager in one small binary, for kube-apiserver v1.34 to v1.37).\n\nUsage:\n  edgekcm [run] [flags]\n  \
         edgekcm certs [flags]    (write a cluster's certificates; see edgekcm certs --help)\n",
    );
    let mut groups: Vec<&str> = Vec::new();
    for f in ACTED {
        if !groups.contains(&f.group) {
            groups.push(f.group);
        }
    }
    for g in groups {
        out.push_str(&format!("\n{g}:\n"));
        for f in ACTED.iter().filter(|f| f.group == g) {
            let spelled = if f.name == "v" {
                "-v, --v int".to_string()
            } else if f.boolean {
                format!("    --{}", f.name)
            } else if f.list {
                format!("    --{} strings", f.name)
            } else {
                format!("    --{} value", f.name)
            };
            let default = if f.default.is_empty() || (f.boolean && f.default == "false") {
                String::new()
            } else {
                format!(" (default {})", f.default)
            };
            let pending = not_acted_on_yet(f.name)
                .map(|why| format!(" Not acted on yet: {why}."))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {spelled}\n        {}{default}{pending}\n",
                f.help
            ));
            if f.name == "controllers" {
                out.push_str(&controllers_help());
            }
        }
        if g == GENERIC {
            out.push_str("\nConcurrency flags (workers per controller):\n");
            for (name, default) in CONCURRENT_SYNCS {
                let pending = if not_acted_on_yet(name).is_some() {
                    "  not acted on yet: its controller is not in edgekcm yet"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "      --{name} int (default {default}){pending}\n"
                ));
            }
        }
    }
    out.push_str(&format!(
        "\n  -h, --help       Show this help.\n      --version    Print the version.\n\n\
         Flags marked \"Not acted on yet\" are read and checked (files included) but do\n\
         nothing until what acts on them is in edgekcm; at start, one log line names the\n\
         controllers kube-controller-manager would run with the flags given that edgekcm\n\
         does not have yet.\n\
         Also acted on, with upstream's types and defaults:\n{}.\n\
         Every other kube-controller-manager v1.37 flag is accepted with a warning and ignored\n\
         (its value is checked as upstream checks it, and /configz shows it); flags removed\n\
         upstream (--address, --port, klog file flags, ...) are accepted with a warning too.\n\
         Flag names may use '_' or '-'.\n",
        read_as_given()
    ));
    out
}

/// The flags controllers read from their checked text, wrapped at 80 columns.
fn read_as_given() -> String {
    let mut out = String::new();
    let mut line = String::new();
    for (i, f) in super::flags::READ_AS_GIVEN.iter().enumerate() {
        let item = if i == 0 {
            format!("--{f}")
        } else {
            format!(", --{f}")
        };
        if line.len() + item.len() > 80 {
            out.push_str(&line);
            out.push_str(",\n");
            line = format!("--{f}");
        } else {
            line.push_str(&item);
        }
    }
    out + &line
}

/// The names `--controllers` takes, as upstream's help lists them, and which edgekcm runs.
fn controllers_help() -> String {
    const INDENT: &str = "        ";
    let block = |head: &str, items: Vec<String>| {
        // The indent counts toward the first line's width too.
        format!(
            "{}\n",
            registry::wrap_list(&format!("{INDENT}{head}"), &items, 100, INDENT)
        )
    };
    let mut disabled: Vec<String> = registry::known()
        .iter()
        .filter(|c| c.disabled_by_default)
        .map(|c| c.name.to_string())
        .collect();
    crate::sort::sort(&mut disabled[..]);
    let mut running: Vec<String> = registry::implemented()
        .map(|c| c.name.to_string())
        .collect();
    crate::sort::sort(&mut running[..]);
    let not_yet: Vec<String> = registry::not_yet_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut text = [
        block(
            "All controllers (short names in parentheses):",
            registry::described_names(),
        ),
        block("Disabled-by-default controllers:", disabled),
        block("In edgekcm today:", running),
    ]
    .concat();
    // Every controller of v1.37 runs today; a name accepted but not run would be listed.
    if !not_yet.is_empty() {
        text.push_str(&block("Accepted, not in edgekcm yet:", not_yet));
    }
    text
}
