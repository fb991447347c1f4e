//! `/configz` and `/debug/flags/v` on edgekcm's secure port, over HTTPS and behind delegated
//! authentication and authorization, as kube-controller-manager serves them: the
//! configuration as JSON, and a verbosity that changes the log at once (klog's text and
//! component-base's JSON lines).

use crate::common::{
    create_namespace, delete_namespace, eventually, free_port, insecure_https_agent,
    kubeconfig_arg, service_account_token, unique, Kcm, Target,
};
use std::time::Duration;

struct Answer {
    status: u16,
    content_type: String,
    nosniff: bool,
    body: String,
}

fn call(agent: &ureq::Agent, method: &str, url: &str, token: Option<&str>, body: &str) -> Answer {
    let auth = token.map(|t| format!("Bearer {t}"));
    let result = match method {
        "PUT" => {
            let mut r = agent.put(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send(body)
        }
        _ => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
    };
    let mut r = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (content_type, nosniff) = (header("content-type"), header("x-content-type-options"));
    Answer {
        status: r.status().as_u16(),
        content_type,
        nosniff: nosniff == "nosniff",
        body: r.body_mut().read_to_string().unwrap_or_default(),
    }
}

/// The `-v 2` line of that ServiceAccount's creation, if the log has it (it is written as the
/// create is answered; a moment is allowed for it).
fn creation_logged(kcm: &Kcm, ns: &str) -> bool {
    let wanted = format!("created serviceaccounts {ns}/default");
    std::thread::sleep(Duration::from_millis(300));
    kcm.log_text().lines().any(|l| l.contains(&wanted))
}

fn scenario(t: &Target, json_logs: bool) {
    let admin = t.admin();
    let home = unique("configz");
    create_namespace(&admin, &home);
    let ops = service_account_token(&admin, &home, "ops");
    let noperm = service_account_token(&admin, &home, "noperm");
    let sb = t.sandbox().expect("a sandbox");
    for path in ["/configz", "/debug/flags/v"] {
        sb.deny_access(&format!("system:serviceaccount:{home}:noperm"), path);
        sb.deny_access("system:anonymous", path);
    }

    let port = free_port();
    let kc = kubeconfig_arg(t);
    let mut flags = vec![
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--controllers=serviceaccount".to_string(),
        "--leader-elect=false".to_string(),
        "--v=0".to_string(),
        "--node-eviction-rate=0.2".to_string(),
        "--concurrent-deployment-syncs=0x7".to_string(),
        "--concurrent-resourceclaim-syncs=33".to_string(),
    ];
    if json_logs {
        flags.push("--logging-format=json".to_string());
    }
    let extra: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut kcm = Kcm::start(t, "configz", &extra);
    let base = format!("https://127.0.0.1:{port}");
    let agent = insecure_https_agent(None);
    eventually(Duration::from_secs(30), "/healthz answers", || {
        assert!(
            kcm.exited().is_none(),
            "edgekcm exited:\n{}",
            kcm.log_text()
        );
        let a = agent.get(&format!("{base}/healthz")).call().ok()?;
        (a.status().as_u16() == 200).then_some(())
    });
    let configz = format!("{base}/configz");
    let flags_v = format!("{base}/debug/flags/v");

    // /configz: what edgekcm renders for these flags, as upstream's handler answers it.
    let a = call(&agent, "GET", &configz, Some(&ops), "");
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.content_type, "application/json");
    assert!(a.nosniff);
    let mut args = t.edgekcm_args();
    args.extend(flags.iter().cloned());
    let cfg = match edgekcm::cli::parse(&args) {
        Ok(edgekcm::cli::Command::Run(c)) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        a.body,
        edgekcm::config::componentconfig::document(&cfg).unwrap()
    );
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    let c = &v["kubecontrollermanager.config.k8s.io"];
    assert_eq!(
        c["Generic"]["Controllers"],
        serde_json::json!(["serviceaccount-controller"])
    );
    assert_eq!(c["Generic"]["ClientConnection"]["kubeconfig"], kc.as_str());
    assert_eq!(c["Generic"]["LeaderElection"]["leaderElect"], false);
    assert_eq!(c["DeploymentController"]["ConcurrentDeploymentSyncs"], 7);
    assert!(a.body.contains("\"NodeEvictionRate\":0.2,"));
    assert_eq!(c["ResourceClaimController"]["ConcurrentSyncs"], 33);

    // Authentication and authorization first: the verb is the lower-case method.
    let a = call(&agent, "GET", &configz, None, "");
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a
        .body
        .contains("User \\\"system:anonymous\\\" cannot get path \\\"/configz\\\""));
    let a = call(&agent, "PUT", &flags_v, None, "2");
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a
        .body
        .contains("User \\\"system:anonymous\\\" cannot put path \\\"/debug/flags/v\\\""));
    let a = call(&agent, "PUT", &flags_v, Some(&noperm), "2");
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.body.contains(&format!(
        "User \\\"system:serviceaccount:{home}:noperm\\\" cannot put path \\\"/debug/flags/v\\\""
    )));
    let a = call(&agent, "GET", &flags_v, Some("not-a-token"), "");
    assert_eq!(a.status, 401, "{}", a.body);

    // At -v 0 a write is not logged; after `PUT 2` it is, after `PUT 0` no more.
    let quiet = kcm.served_namespace(&admin, "quiet", Duration::from_secs(30));
    assert!(!creation_logged(&kcm, &quiet), "{}", kcm.log_text());
    let a = call(&agent, "PUT", &flags_v, Some(&ops), "2");
    assert_eq!(
        (
            a.status,
            a.content_type.as_str(),
            a.body.as_str(),
            a.nosniff
        ),
        (
            200,
            "text/plain",
            "successfully set klog.logging.verbosity to 2\n",
            true
        )
    );
    let loud = kcm.served_namespace(&admin, "loud", Duration::from_secs(30));
    eventually(Duration::from_secs(5), "the -v 2 line", || {
        creation_logged(&kcm, &loud).then_some(())
    });
    if json_logs {
        let line = kcm
            .log_text()
            .lines()
            .find(|l| l.contains(&format!("created serviceaccounts {loud}/default")))
            .map(str::to_string)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["v"], 2, "{line}");
    }
    let a = call(&agent, "PUT", &flags_v, Some(&ops), "0");
    assert_eq!(a.status, 200, "{}", a.body);
    let quiet_again = kcm.served_namespace(&admin, "quiet", Duration::from_secs(30));
    assert!(!creation_logged(&kcm, &quiet_again), "{}", kcm.log_text());

    // What upstream answers to other methods and values.
    let a = call(&agent, "GET", &flags_v, Some(&ops), "");
    assert_eq!(
        (a.status, a.content_type.as_str(), a.body.as_str()),
        (406, "text/plain", "unsupported http method\n")
    );
    let a = call(&agent, "PUT", &flags_v, Some(&ops), "3\n");
    assert_eq!(
        (a.status, a.body.as_str()),
        (400, "strconv.ParseUint: parsing \"3\\n\": invalid syntax\n")
    );

    kcm.kill();
    for ns in [home, quiet, loud, quiet_again] {
        delete_namespace(&admin, &ns);
    }
}

#[test]
fn sandbox_configz_and_runtime_verbosity() {
    scenario(&crate::common::sandbox(), false);
}

#[test]
fn sandbox_runtime_verbosity_with_json_logs() {
    scenario(&crate::common::sandbox(), true);
}

/// GET `path` with an `Accept` header: status, content type, body.
fn get_accept(agent: &ureq::Agent, url: &str, token: &str, accept: &str) -> (u16, String, String) {
    let mut r = agent
        .get(url)
        .header("Authorization", &format!("Bearer {token}"))
        .header("Accept", accept)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (
        r.status().as_u16(),
        ct,
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// `/flagz` and `/statusz` (ComponentFlagz, ComponentStatusz: on at v1.37), behind the same
/// authorization as `/configz`; not served when emulating v1.35, where the gates are off.
fn zpages(emulated: Option<&str>) -> Vec<(String, u16)> {
    let t = crate::common::sandbox();
    let admin = t.admin();
    let home = unique("zpages");
    create_namespace(&admin, &home);
    let ops = service_account_token(&admin, &home, "ops");
    t.sandbox()
        .expect("a sandbox")
        .deny_access("system:anonymous", "/flagz");
    let port = free_port();
    let kc = kubeconfig_arg(&t);
    let mut flags = vec![
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--controllers=serviceaccount".to_string(),
        "--leader-elect=false".to_string(),
        "--node-monitor-grace-period=90s".to_string(),
    ];
    if let Some(v) = emulated {
        flags.push(format!("--emulated-version={v}"));
    }
    let extra: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut kcm = Kcm::start(&t, "zpages", &extra);
    let base = format!("https://127.0.0.1:{port}");
    let agent = insecure_https_agent(None);
    // Served once the emulated version is settled (after the API server's version is read).
    kcm.served_namespace(&admin, "zp", Duration::from_secs(30));
    let mut out = Vec::new();
    for (path, accept) in [
        ("/flagz", "*/*"),
        (
            "/flagz",
            "application/json;as=Flagz;v=v1beta1;g=config.k8s.io",
        ),
        (
            "/statusz",
            "application/json;as=Statusz;v=v1beta1;g=config.k8s.io",
        ),
        ("/statusz", "application/json"),
    ] {
        let (status, ct, body) = get_accept(&agent, &format!("{base}{path}"), &ops, accept);
        if status == 200 && ct.starts_with("application/json") {
            let v: serde_json::Value = serde_json::from_str(&body).expect("json");
            if path == "/flagz" {
                assert_eq!(v["flags"]["node-monitor-grace-period"], "1m30s");
                assert_eq!(v["flags"]["controllers"], "[serviceaccount]");
                assert_eq!(v["flags"]["kube-api-qps"], "20");
            } else {
                assert_eq!(v["emulationVersion"], "1.37");
                assert_eq!(v["paths"][0], "/configz");
            }
        } else if status == 200 {
            assert!(
                body.starts_with("\nkube-controller-manager flagz\nWarning: "),
                "{body}"
            );
        }
        out.push((format!("{path} {accept}"), status));
    }
    let a = call(&agent, "GET", &format!("{base}/flagz"), None, "");
    out.push(("/flagz anonymous".into(), a.status));
    drop(kcm);
    delete_namespace(&admin, &home);
    out
}

#[test]
fn sandbox_flagz_and_statusz() {
    let got = zpages(None);
    let statuses: Vec<u16> = got.iter().map(|(_, s)| *s).collect();
    assert_eq!(statuses, [200, 200, 200, 406, 403], "{got:?}");
}

#[test]
fn sandbox_no_flagz_or_statusz_when_emulating_1_35() {
    let got = zpages(Some("1.35"));
    let statuses: Vec<u16> = got.iter().map(|(_, s)| *s).collect();
    assert_eq!(statuses, [404, 404, 404, 404, 403], "{got:?}");
}
