//! Kubeconfigs with inline client certificates.

use super::*;

pub(super) fn kubeconfig_yaml(
    cluster: &str,
    server: &str,
    ca_pem: &str,
    user: &str,
    leaf: &Leaf,
) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string());
    let context = format!("{user}@{cluster}");
    format!(
        "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: {server}
  name: {cluster}
contexts:
- context:
    cluster: {cluster}
    user: {user}
  name: {context}
current-context: {context}
preferences: {{}}
users:
- name: {user}
  user:
    client-certificate-data: {crt}
    client-key-data: {key}
",
        ca = b64(ca_pem),
        server = q(server),
        cluster = q(cluster),
        user = q(user),
        context = q(&context),
        crt = b64(&leaf.cert_pem),
        key = b64(&leaf.key_pem),
    )
}

#[allow(clippy::too_many_arguments)]
pub(super) fn kubeconfig(
    o: &CertsOptions,
    ca: &Ca,
    r: &mut Report,
    file: &str,
    user: &str,
    org: Option<&str>,
    what: &str,
    now: SystemTime,
) -> Result<()> {
    let path = o.kubeconfig_dir.join(file);
    let existed = path.exists();
    if existed && !o.replaces(file) {
        let does_not_fit = |path: &Path, why: &str| does_not_fit(o, file, path, why);
        let text =
            String::from_utf8(read(&path)?).map_err(|_| does_not_fit(&path, "not UTF-8 text"))?;
        let origin = format!("kubeconfig {}", path.display());
        let rest = crate::api::kubeconfig::from_kubeconfig_str(&text, &o.kubeconfig_dir, &origin)
            .and_then(|c| c.validate().map(|_| c))
            .map_err(|e| does_not_fit(&path, &e.to_string()))?;
        if rest.server != o.server {
            return Err(does_not_fit(
                &path,
                &format!("its server is {}, not {}", rest.server, o.server),
            ));
        }
        let trusts_ca = rest
            .ca_pem
            .as_deref()
            .and_then(|p| CertificateDer::pem_slice_iter(p).next())
            .and_then(|c| c.ok())
            .is_some_and(|c| c == ca.der);
        if !trusts_ca {
            return Err(does_not_fit(
                &path,
                &format!("it does not trust {}", ca.cert_path.display()),
            ));
        }
        let cert = rest
            .client_cert_pem
            .as_deref()
            .and_then(|p| CertificateDer::pem_slice_iter(p).next())
            .and_then(|c| c.ok())
            .ok_or_else(|| does_not_fit(&path, "it has no client certificate"))?;
        verify_leaf(ca, &cert, &Usage::Client, now).map_err(|e| does_not_fit(&path, &e))?;
        let info = der::parse_cert(&cert)
            .ok_or_else(|| does_not_fit(&path, "its client certificate cannot be read"))?;
        if info.common_name.as_deref() != Some(user) {
            return Err(does_not_fit(
                &path,
                &format!(
                    "its client certificate is for {:?}, not {user:?}",
                    info.common_name.unwrap_or_default()
                ),
            ));
        }
        r.add(
            &path,
            kept(&path, true)?,
            format!("{what}, until {}", describe_time(info.not_after)),
        );
        return Ok(());
    }
    let leaf = sign_leaf(ca, user, org, &Usage::Client, o.days, now)?;
    let yaml = kubeconfig_yaml(&o.cluster_name, &o.server, &ca.pem, user, &leaf);
    write_file(&path, yaml.as_bytes(), 0o600)?;
    r.add(
        &path,
        if existed {
            Status::Replaced
        } else {
            Status::Created
        },
        format!("{what}, until {}", describe_time(leaf.not_after)),
    );
    Ok(())
}
