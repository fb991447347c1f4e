//! `edgekcm --help`.

use super::flags::{ACTED, GENERIC};
use crate::config::CONCURRENT_SYNCS;

/// `--help` output: the flags edgekcm acts on, grouped, with defaults.
pub fn help_text() -> String {
    let mut out = String::new();
    out.push_str(
        "edgekcm runs the Kubernetes controllers (a kube-controller-manager v1.28 compatible\n\
         controller manager in one small binary).\n\nUsage:\n  edgekcm [run] [flags]\n  \
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
            out.push_str(&format!("  {spelled}\n        {}{default}\n", f.help));
        }
        if g == GENERIC {
            out.push_str("\nConcurrency flags (workers per controller):\n");
            for (name, default) in CONCURRENT_SYNCS {
                out.push_str(&format!("      --{name} int (default {default})\n"));
            }
        }
    }
    out.push_str(
        "\n  -h, --help       Show this help.\n      --version    Print the version.\n\n\
         Every other kube-controller-manager v1.28 flag is accepted with a warning and ignored;\n\
         flags removed upstream (--address, --port, klog file flags, ...) are accepted with a\n\
         warning too. Flag names may use '_' or '-'.\n",
    );
    out
}
