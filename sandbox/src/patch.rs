//! Patch application: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the strategic
//! merge patch shapes that controllers send.

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, everything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

// ---- JSON patch -----------------------------------------------------------------------------

fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer {p:?}"));
    };
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn index_of(tok: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if allow_end && tok == "-" {
        return Ok(len);
    }
    let i: usize = tok
        .parse()
        .map_err(|_| format!("invalid array index {tok:?}"))?;
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > max || (!allow_end && len == 0) {
        return Err(format!("array index {i} out of bounds"));
    }
    Ok(i)
}

fn get_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for tok in path {
        cur = match cur {
            Value::Object(m) => m
                .get_mut(tok)
                .ok_or_else(|| format!("path component {tok:?} not found"))?,
            Value::Array(a) => {
                let i = index_of(tok, a.len(), false)?;
                &mut a[i]
            }
            _ => return Err(format!("cannot descend into a scalar at {tok:?}")),
        };
    }
    Ok(cur)
}

fn remove_at(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let Some((last, parent)) = path.split_last() else {
        return Ok(std::mem::take(doc));
    };
    match get_mut(doc, parent)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| format!("path component {last:?} not found")),
        Value::Array(a) => {
            let i = index_of(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err("cannot remove from a scalar".into()),
    }
}

fn add_at(doc: &mut Value, path: &[String], val: Value) -> Result<(), String> {
    let Some((last, parent)) = path.split_last() else {
        *doc = val;
        return Ok(());
    };
    match get_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), val);
            Ok(())
        }
        Value::Array(a) => {
            let i = index_of(last, a.len(), true)?;
            a.insert(i, val);
            Ok(())
        }
        _ => Err("cannot add to a scalar".into()),
    }
}

/// RFC 6902 with add, remove, replace, test, move and copy.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    for op in ops {
        let kind = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or("operation without \"op\"")?;
        let path = parse_pointer(
            op.get("path")
                .and_then(Value::as_str)
                .ok_or("operation without \"path\"")?,
        )?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("{kind} operation without \"value\""))
        };
        let from = || -> Result<Vec<String>, String> {
            parse_pointer(
                op.get("from")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{kind} operation without \"from\""))?,
            )
        };
        match kind {
            "add" => add_at(doc, &path, value()?)?,
            "remove" => {
                remove_at(doc, &path)?;
            }
            "replace" => {
                let v = value()?;
                *get_mut(doc, &path)? = v;
            }
            "test" => {
                let v = value()?;
                if *get_mut(doc, &path)? != v {
                    return Err(format!("testing value {:?} failed", op["path"]));
                }
            }
            "move" => {
                let f = from()?;
                let v = remove_at(doc, &f)?;
                add_at(doc, &path, v)?;
            }
            "copy" => {
                let f = from()?;
                let v = get_mut(doc, &f)?.clone();
                add_at(doc, &path, v)?;
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    Ok(())
}

// ---- strategic merge patch ------------------------------------------------------------------

/// How a list field merges, decided by its name and where it sits (a stand-in for the struct
/// tags upstream reads from the Go types).
enum ListStrategy {
    Replace,
    MergeKey(&'static str),
    PrimitiveMerge,
}

fn list_strategy(path: &[String], field: &str) -> ListStrategy {
    let in_container = path.iter().any(|p| {
        matches!(
            p.as_str(),
            "containers" | "initContainers" | "ephemeralContainers"
        )
    });
    match field {
        "finalizers" if path.last().is_some_and(|p| p == "metadata") => {
            ListStrategy::PrimitiveMerge
        }
        "ownerReferences" => ListStrategy::MergeKey("uid"),
        "conditions" => ListStrategy::MergeKey("type"),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => ListStrategy::MergeKey("name"),
        "secrets" if !in_container => ListStrategy::MergeKey("name"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "ports" if in_container => ListStrategy::MergeKey("containerPort"),
        "ports" => ListStrategy::MergeKey("port"),
        "addresses" if path.last().is_some_and(|p| p == "status") => ListStrategy::MergeKey("type"),
        "podIPs" | "hostAliases" => ListStrategy::MergeKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        _ => ListStrategy::Replace,
    }
}

/// Apply a strategic merge patch to `target`.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    smp_value(target, patch, &mut Vec::new())
}

fn smp_value(target: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            *target = Value::Object(m);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some(other) if other != "merge" => {
            return Err(format!("unknown patch type: {other}"));
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    let mut retain: Option<Vec<String>> = None;
    for (k, v) in p {
        if k == "$patch" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if k == "$retainKeys" {
            retain = v.as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            });
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = t.get_mut(field) {
                list.retain(|x| !remove.contains(x));
                if list.is_empty() {
                    t.remove(field);
                }
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        if let Value::Array(items) = v {
            let existing = t.remove(k);
            let merged = merge_list(existing, items, path, k)?;
            if let Some(m) = merged {
                t.insert(k.clone(), m);
            }
            continue;
        }
        let slot = t.entry(k.clone()).or_insert(Value::Null);
        path.push(k.clone());
        let r = smp_value(slot, v, path);
        path.pop();
        r?;
        if slot.is_null() {
            t.remove(k);
        }
    }
    if let Some(keep) = retain {
        t.retain(|k, _| keep.contains(k));
    }
    Ok(())
}

fn merge_list(
    existing: Option<Value>,
    items: &[Value],
    path: &mut Vec<String>,
    field: &str,
) -> Result<Option<Value>, String> {
    let old = match existing {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    match list_strategy(path, field) {
        ListStrategy::Replace => Ok(Some(Value::Array(strip_directives(items)))),
        ListStrategy::PrimitiveMerge => {
            let mut out = old;
            for i in items {
                if !out.contains(i) {
                    out.push(i.clone());
                }
            }
            Ok(Some(Value::Array(out)))
        }
        ListStrategy::MergeKey(key) => {
            if items
                .iter()
                .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                let rest: Vec<Value> = items
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .cloned()
                    .collect();
                return Ok(Some(Value::Array(rest)));
            }
            let mut out = old;
            path.push(field.to_string());
            for item in items {
                let Some(id) = item.get(key) else {
                    if !item.is_object() {
                        out.push(item.clone());
                        continue;
                    }
                    path.pop();
                    return Err(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    ));
                };
                let pos = out.iter().position(|o| o.get(key) == Some(id));
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    out.retain(|o| o.get(key) != Some(id));
                    continue;
                }
                match pos {
                    Some(i) => {
                        let r = smp_value(&mut out[i], item, path);
                        if r.is_err() {
                            path.pop();
                            return r.map(|_| None);
                        }
                    }
                    None => {
                        let mut fresh = Value::Object(Map::new());
                        let r = smp_value(&mut fresh, item, path);
                        if r.is_err() {
                            path.pop();
                            return r.map(|_| None);
                        }
                        out.push(fresh);
                    }
                }
            }
            path.pop();
            Ok(Some(Value::Array(out)))
        }
    }
}

fn strip_directives(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .filter(|i| i.get("$patch").is_none())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (mut t, p, want) in cases {
            merge_patch(&mut t, &p);
            assert_eq!(t, want, "patch {p}");
        }
    }

    #[test]
    fn json_patch_ops() {
        let mut d = json!({"a": {"b": [1, 2]}, "c": "x", "k~/": 1});
        json_patch(
            &mut d,
            &json!([
                {"op": "add", "path": "/a/b/-", "value": 3},
                {"op": "add", "path": "/a/b/0", "value": 0},
                {"op": "replace", "path": "/c", "value": "y"},
                {"op": "test", "path": "/c", "value": "y"},
                {"op": "copy", "from": "/c", "path": "/d"},
                {"op": "move", "from": "/d", "path": "/e"},
                {"op": "remove", "path": "/a/b/1"},
                {"op": "remove", "path": "/k~0~1"}
            ]),
        )
        .unwrap();
        assert_eq!(d, json!({"a": {"b": [0, 2, 3]}, "c": "y", "e": "y"}));
        assert!(json_patch(&mut d, &json!([{"op": "test", "path": "/c", "value": "n"}])).is_err());
        assert!(json_patch(&mut d, &json!([{"op": "remove", "path": "/zz"}])).is_err());
        assert!(json_patch(
            &mut d,
            &json!([{"op": "replace", "path": "/a/b/9", "value": 1}])
        )
        .is_err());
        assert!(json_patch(&mut d, &json!({"op": "add"})).is_err());
        assert!(json_patch(&mut d, &json!([{"op": "frob", "path": "/c"}])).is_err());
    }

    #[test]
    fn smp_owner_references_and_finalizers() {
        let mut pod = json!({"metadata": {"name": "p", "finalizers": ["a"],
            "ownerReferences": [{"uid": "1", "name": "rs1", "controller": true}]}});
        // Adoption: adds a second owner, keeps the first.
        strategic_merge_patch(
            &mut pod,
            &json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "rs2"}], "uid": "u",
                                  "finalizers": ["b", "a"]}}),
        )
        .unwrap();
        assert_eq!(
            pod["metadata"]["ownerReferences"].as_array().unwrap().len(),
            2
        );
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        // Release: delete by uid; remove a finalizer.
        strategic_merge_patch(
            &mut pod,
            &json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "1"}],
                                  "$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"uid": "2", "name": "rs2"}])
        );
        assert_eq!(pod["metadata"]["finalizers"], json!(["b"]));
        strategic_merge_patch(
            &mut pod,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
        )
        .unwrap();
        assert!(pod["metadata"].get("finalizers").is_none());
    }

    #[test]
    fn smp_conditions_containers_and_replace_lists() {
        let mut obj = json!({
            "spec": {"taints": [{"key": "a"}], "template": {"spec": {"containers": [
                {"name": "c", "image": "x", "ports": [{"containerPort": 80, "name": "http"}],
                 "env": [{"name": "A", "value": "1"}]}]}}},
            "status": {"conditions": [{"type": "Ready", "status": "False"},
                                      {"type": "Other", "status": "True"}]}
        });
        strategic_merge_patch(
            &mut obj,
            &json!({
                "spec": {"taints": [{"key": "b"}], "template": {"spec": {"containers": [
                    {"name": "c", "image": "y", "ports": [{"containerPort": 81}],
                     "env": [{"name": "B", "value": "2"}]},
                    {"name": "d", "image": "z"}]}}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Other"}]}
            }),
        )
        .unwrap();
        assert_eq!(obj["spec"]["taints"], json!([{"key": "b"}]));
        let cs = obj["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "y");
        assert_eq!(cs[0]["ports"].as_array().unwrap().len(), 2);
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(
            obj["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Other", "status": "True"}])
        );
        // null deletes, $patch: replace on a map, $retainKeys.
        strategic_merge_patch(
            &mut obj,
            &json!({"status": {"$patch": "replace", "phase": "x"},
                    "spec": {"$retainKeys": ["template"], "taints": null}}),
        )
        .unwrap();
        assert_eq!(obj["status"], json!({"phase": "x"}));
        assert!(obj["spec"].get("taints").is_none());
        // A list element without its merge key is an error.
        assert!(strategic_merge_patch(
            &mut obj,
            &json!({"metadata": {"ownerReferences": [{"name": "x"}]}})
        )
        .is_err());
    }
}
