//! YAML to JSON for kubeconfigs, with bounds.
//!
//! yaml-rust2's `YamlLoader` builds a document recursively and expands every alias by copying
//! the anchored node: a few hundred bytes of nested `- - - ...` overflow the stack (an abort,
//! not an error), and nine levels of aliases to ten aliases each ("billion laughs") ask for
//! 10^9 nodes. This loader gives the same tree and the same errors for ordinary documents, but
//! pulls the parser's events in a loop and refuses, as a YAML error, a document nested more
//! than [`MAX_DEPTH`] deep or holding more than [`MAX_NODES`] nodes once aliases are expanded.
//! A kubeconfig is five levels deep, and a few dozen nodes per cluster, context and user.

use std::collections::HashMap;

use serde_json::Value;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};
use yaml_rust2::yaml::Hash;
use yaml_rust2::Yaml;

/// Deepest nesting of sequences and mappings accepted (aliases counted where they expand).
pub const MAX_DEPTH: usize = 100;
/// Most nodes a stream may hold, aliases counted as the nodes they stand for.
pub const MAX_NODES: usize = 200_000;

/// A node with its size: nodes in it (itself included) and its height (a scalar: 0).
struct Sized {
    yaml: Yaml,
    nodes: usize,
    height: usize,
}

/// A sequence or mapping being read.
struct Open {
    node: Yaml,
    anchor: usize,
    /// The key waiting for its value (`BadValue`: none), as in `YamlLoader`.
    key: Yaml,
    nodes: usize,
    height: usize,
}

/// The first document of `text` as JSON (`Null` for an empty stream). Later documents are
/// parsed (an error in them is an error) but not kept.
pub fn first_document(text: &str) -> Result<Value, String> {
    let first = load(text).map_err(|e| e.to_string())?;
    Ok(first.as_ref().map(yaml_to_json).unwrap_or(Value::Null))
}

fn load(text: &str) -> Result<Option<Yaml>, ScanError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Open> = Vec::new();
    let mut root: Option<Sized> = None;
    let mut first: Option<Yaml> = None;
    let mut anchors: HashMap<usize, Sized> = HashMap::new();
    let mut total = 0usize;
    // As `YamlLoader`: after a duplicate key the rest is still parsed, and a syntax error
    // further on is the one reported.
    let mut failed: Option<ScanError> = None;
    // Anchors are per document: `Parser::load` forgets them at each document's start, pulling
    // events does not, so an alias to an earlier document's anchor is refused here.
    let (mut last_anchor, mut doc_floor) = (0usize, 0usize);
    loop {
        let (ev, mark) = parser.next_token()?;
        match ev {
            Event::DocumentStart => doc_floor = last_anchor,
            Event::SequenceStart(a, _) | Event::MappingStart(a, _) | Event::Scalar(_, _, a, _) => {
                last_anchor = last_anchor.max(a);
            }
            Event::Alias(id) if id <= doc_floor => {
                return Err(ScanError::new(
                    mark,
                    "while parsing node, found unknown anchor",
                ));
            }
            _ => {}
        }
        if let Some(e) = failed.take() {
            if ev == Event::StreamEnd {
                return Err(e);
            }
            failed = Some(e);
            continue;
        }
        let step = match ev {
            Event::StreamEnd => return Ok(first),
            Event::Nothing | Event::StreamStart | Event::DocumentStart => Ok(()),
            Event::DocumentEnd => {
                let doc = root.take().map_or(Yaml::BadValue, |r| r.yaml);
                first.get_or_insert(doc);
                Ok(())
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(too_deep(mark));
                }
                total += 1;
                if total > MAX_NODES {
                    return Err(too_many(mark));
                }
                let node = match ev {
                    Event::SequenceStart(..) => Yaml::Array(Vec::new()),
                    _ => Yaml::Hash(Hash::new()),
                };
                stack.push(Open {
                    node,
                    anchor,
                    key: Yaml::BadValue,
                    nodes: 1,
                    height: 1,
                });
                Ok(())
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let open = stack
                    .pop()
                    .ok_or_else(|| ScanError::new(mark, "unbalanced end of a collection"))?;
                let node = Sized {
                    yaml: open.node,
                    nodes: open.nodes,
                    height: open.height,
                };
                insert(&mut stack, &mut root, &mut anchors, node, open.anchor, mark)
            }
            Event::Scalar(v, style, anchor, tag) => {
                total += 1;
                if total > MAX_NODES {
                    return Err(too_many(mark));
                }
                let node = Sized {
                    yaml: scalar(v, style, tag),
                    nodes: 1,
                    height: 0,
                };
                insert(&mut stack, &mut root, &mut anchors, node, anchor, mark)
            }
            Event::Alias(id) => {
                let node = match anchors.get(&id) {
                    Some(a) => {
                        if stack.len() + a.height > MAX_DEPTH {
                            return Err(too_deep(mark));
                        }
                        total += a.nodes;
                        if total > MAX_NODES {
                            return Err(too_many(mark));
                        }
                        Sized {
                            yaml: a.yaml.clone(),
                            nodes: a.nodes,
                            height: a.height,
                        }
                    }
                    None => Sized {
                        yaml: Yaml::BadValue,
                        nodes: 1,
                        height: 0,
                    },
                };
                insert(&mut stack, &mut root, &mut anchors, node, 0, mark)
            }
        };
        if let Err(e) = step {
            failed = Some(e);
        }
    }
}

fn too_deep(mark: Marker) -> ScanError {
    ScanError::new_string(mark, format!("nested more than {MAX_DEPTH} deep"))
}

fn too_many(mark: Marker) -> ScanError {
    ScanError::new_string(
        mark,
        format!("more than {MAX_NODES} nodes (aliases counted as what they stand for)"),
    )
}

/// `YamlLoader::insert_new_node`, with the sizes carried along.
fn insert(
    stack: &mut [Open],
    root: &mut Option<Sized>,
    anchors: &mut HashMap<usize, Sized>,
    node: Sized,
    anchor: usize,
    mark: Marker,
) -> Result<(), ScanError> {
    if anchor > 0 {
        let copy = Sized {
            yaml: node.yaml.clone(),
            nodes: node.nodes,
            height: node.height,
        };
        anchors.insert(anchor, copy);
    }
    let Some(parent) = stack.last_mut() else {
        *root = Some(node);
        return Ok(());
    };
    parent.nodes += node.nodes;
    parent.height = parent.height.max(node.height + 1);
    match &mut parent.node {
        Yaml::Array(v) => v.push(node.yaml),
        Yaml::Hash(h) => {
            if parent.key.is_badvalue() {
                parent.key = node.yaml;
            } else {
                let key = std::mem::replace(&mut parent.key, Yaml::BadValue);
                if h.insert(key, node.yaml).is_some() {
                    let inserted_key = h.back().map_or(&Yaml::BadValue, |(k, _)| k);
                    return Err(ScanError::new_string(
                        mark,
                        format!("{inserted_key:?}: duplicated key in mapping"),
                    ));
                }
            }
        }
        _ => return Err(ScanError::new(mark, "a scalar cannot hold nodes")),
    }
    Ok(())
}

/// A scalar as `YamlLoader` reads it: quoted and block scalars are strings, plain ones are
/// resolved (null, booleans, integers, floats), `!!` core tags are applied.
fn scalar(v: String, style: TScalarStyle, tag: Option<Tag>) -> Yaml {
    if style != TScalarStyle::Plain {
        return Yaml::String(v);
    }
    let Some(Tag { handle, suffix }) = tag else {
        return Yaml::from_str(&v);
    };
    if handle != "tag:yaml.org,2002:" {
        return Yaml::String(v);
    }
    match suffix.as_str() {
        "bool" => match v.as_str() {
            "true" | "True" | "TRUE" => Yaml::Boolean(true),
            "false" | "False" | "FALSE" => Yaml::Boolean(false),
            _ => Yaml::BadValue,
        },
        "int" => v.parse::<i64>().map_or(Yaml::BadValue, Yaml::Integer),
        "float" => match parse_f64(&v) {
            Some(_) => Yaml::Real(v),
            None => Yaml::BadValue,
        },
        "null" => match v.as_str() {
            "~" | "null" => Yaml::Null,
            _ => Yaml::BadValue,
        },
        _ => Yaml::String(v),
    }
}

/// yaml-rust2's float resolution (Core schema).
fn parse_f64(v: &str) -> Option<f64> {
    match v {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => Some(f64::NAN),
        _ if v.bytes().any(|b| b.is_ascii_digit()) => v.parse::<f64>().ok(),
        _ => None,
    }
}

/// Convert a YAML tree into JSON. Keys that are not strings are rendered as strings.
pub(crate) fn yaml_to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Null | Yaml::BadValue | Yaml::Alias(_) => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(s) => s
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(s.clone())),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(a) => Value::Array(a.iter().map(yaml_to_json).collect()),
        Yaml::Hash(h) => {
            let mut m = serde_json::Map::new();
            for (k, v) in h {
                let key = match k {
                    Yaml::String(s) | Yaml::Real(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    _ => continue,
                };
                m.insert(key, yaml_to_json(v));
            }
            Value::Object(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What yaml-rust2's own loader gives, converted the same way.
    fn reference(text: &str) -> Result<Value, String> {
        let docs = yaml_rust2::YamlLoader::load_from_str(text).map_err(|e| e.to_string())?;
        Ok(docs.first().map(yaml_to_json).unwrap_or(Value::Null))
    }

    #[test]
    fn same_as_yaml_rust2_for_ordinary_documents() {
        for text in [
            "",
            "---\n...\n",
            "a: 1\nb: [x, 'y', \"z\"]\nc: {d: null, e: ~, f: true, g: 0x1f, h: 1.5, i: .inf}\n",
            "- &a {k: v}\n- *a\n- !!str 5\n- !!int 7\n- !!bool nope\n- !custom x\n",
            "a: |\n  block\n  text\nb: >\n  folded\n  text\n",
            "? [complex, key]\n: value\n1: one\ntrue: yes\n3.5: x\n",
            "first: doc\n---\nsecond: doc\n",
            "a: 1\na: 2\n",
            "a: 1\na: 2\nb: [\n",
            "a: [1, 2\n",
            "key: *unknown\n",
            "%TAG !e! tag:example.com,2000:\n--- !e!x\nk: v\n",
            "a: &x 1\n---\nb: *x\n",
        ] {
            assert_eq!(first_document(text), reference(text), "{text:?}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        // yaml-rust2's loader overflows the main thread's stack on this.
        let text = format!("{}x\n", "- ".repeat(200_000));
        let err = first_document(&text).unwrap_err();
        assert!(err.starts_with("nested more than 100 deep"), "{err}");
        let text = format!("{}{}", "[".repeat(250), "]".repeat(250));
        assert!(first_document(&text).is_err());
        let ok = format!("{}x\n", "- ".repeat(MAX_DEPTH));
        assert!(first_document(&ok).is_ok());
    }

    #[test]
    fn alias_expansion_is_bounded() {
        // Ten aliases to ten aliases ... nine levels: 10^9 nodes with yaml-rust2's loader.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = format!("*a{}", i - 1);
            text += &format!("a{i}: &a{i} [{}]\n", [p.as_str(); 10].join(", "));
        }
        let t = std::time::Instant::now();
        let err = first_document(&text).unwrap_err();
        assert!(err.starts_with("more than 200000 nodes"), "{err}");
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        // Aliases that nest deeper than the limit where they expand.
        let mut text = String::from("a0: &a0 [[[[[[[[[[x]]]]]]]]]]\n");
        for i in 1..12 {
            text += &format!("a{i}: &a{i} [[[[[[[[[[*a{}]]]]]]]]]]\n", i - 1);
        }
        let err = first_document(&text).unwrap_err();
        assert!(err.starts_with("nested more than"), "{err}");
    }
}
