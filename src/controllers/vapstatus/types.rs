//! CEL types as the type checker sees them, named and formatted as cel-go formats them in
//! its messages, and built from an OpenAPI v3 schema as the API server's `SchemaDeclType`
//! builds them (then named `<Kind><n>`, `<Kind><n>.spec`, `<Kind><n>.spec.items.@idx`, ...
//! as `MaybeAssignTypeName` does).

use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Dyn,
    /// What a failed part of an expression has: assignable everywhere, no further message.
    Error,
    /// A type this checker does not know (an unmodelled function's result): accepted
    /// everywhere like `dyn`, and a message that would have to name it is not given.
    Unknown,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Timestamp,
    Duration,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    Obj(Arc<Obj>),
    /// A type parameter of an overload (`A`), while overloads are matched.
    Param(u8),
}

/// An object type: its name and its fields. The fields of a type read from a schema are
/// read when first asked for (a Pod's whole tree of types is large, and an expression
/// touches a few of its branches).
pub struct Obj {
    pub name: String,
    fields: OnceLock<BTreeMap<String, Ty>>,
    from: Option<(Arc<Schemas>, Value, bool)>,
}

impl Obj {
    pub fn new(name: String, fields: BTreeMap<String, Ty>) -> Obj {
        Obj {
            name,
            fields: OnceLock::from(fields),
            from: None,
        }
    }

    pub fn fields(&self) -> &BTreeMap<String, Ty> {
        self.fields.get_or_init(|| match &self.from {
            Some((schemas, s, root)) => object_fields(schemas, s, &self.name, *root),
            None => BTreeMap::new(),
        })
    }
}

/// Types are named uniquely: two object types are the same when their names are.
impl PartialEq for Obj {
    fn eq(&self, other: &Obj) -> bool {
        self.name == other.name
    }
}

impl std::fmt::Debug for Obj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Obj({})", self.name)
    }
}

/// The schemas of an OpenAPI v3 document by name, each parsed when needed.
pub type Schemas = HashMap<String, Box<RawValue>>;

impl Ty {
    pub fn list(t: Ty) -> Ty {
        Ty::List(Box::new(t))
    }

    pub fn map(k: Ty, v: Ty) -> Ty {
        Ty::Map(Box::new(k), Box::new(v))
    }

    pub fn obj(name: &str, fields: Vec<(&str, Ty)>) -> Ty {
        Ty::Obj(Arc::new(Obj::new(
            name.to_string(),
            fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )))
    }

    /// `dyn`, the error type or an unknown one: accepted wherever a type is asked for.
    pub fn is_wild(&self) -> bool {
        matches!(self, Ty::Dyn | Ty::Error | Ty::Unknown)
    }

    /// Whether an unknown type is part of it (then no message names it).
    pub fn has_unknown(&self) -> bool {
        match self {
            Ty::Unknown => true,
            Ty::List(e) => e.has_unknown(),
            Ty::Map(k, v) => k.has_unknown() || v.has_unknown(),
            _ => false,
        }
    }
}

/// cel-go's `FormatCELType`.
pub fn format(t: &Ty) -> String {
    match t {
        Ty::Dyn | Ty::Unknown | Ty::Param(_) => "dyn".into(),
        Ty::Error => "!error!".into(),
        Ty::Null => "null".into(),
        Ty::Bool => "bool".into(),
        Ty::Int => "int".into(),
        Ty::Uint => "uint".into(),
        Ty::Double => "double".into(),
        Ty::String => "string".into(),
        Ty::Bytes => "bytes".into(),
        Ty::Timestamp => "timestamp".into(),
        Ty::Duration => "duration".into(),
        Ty::List(e) => format!("list({})", format(e)),
        Ty::Map(k, v) => format!("map({}, {})", format(k), format(v)),
        Ty::Obj(o) => o.name.clone(),
    }
}

/// The names cel-go reserves, which the API server escapes as `__name__` in field names.
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Whether a field name is one the API server escapes as `__name__` (and a selection of the
/// plain name finds).
pub fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name)
}

/// The API server's `Escape` of a property name as a CEL field name; None when the property
/// is not accessible from CEL.
pub fn escape(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'))
    {
        return None;
    }
    let mut out = String::new();
    let chars: Vec<char> = name.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '_' if chars.get(i + 1) == Some(&'_') => {
                out.push_str("__underscores__");
                i += 2;
                continue;
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        i += 1;
    }
    Some(out)
}

/// A schema with its `$ref` (direct or as the only `allOf`) replaced by what it names.
fn deref(schemas: &Schemas, s: &Value) -> Option<Value> {
    let r = s.get("$ref").and_then(Value::as_str).or_else(|| {
        s.get("allOf")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 1)
            .and_then(|a| a[0].get("$ref"))
            .and_then(Value::as_str)
    });
    match r {
        Some(r) => {
            let raw = schemas.get(r.strip_prefix("#/components/schemas/")?)?;
            serde_json::from_str(raw.get()).ok()
        }
        None => Some(s.clone()),
    }
}

fn embedded(schemas: &Schemas, s: &Value) -> bool {
    deref(schemas, s)
        .is_some_and(|s| s.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)))
}

/// Reads a schema into a type named `name`, as `SchemaDeclType` and `MaybeAssignTypeName`:
/// None for a schema CEL cannot see (no type, an array without items, ...). An object's
/// fields are read when first asked for.
pub fn from_schema(schemas: &Arc<Schemas>, s: &Value, name: &str, root: bool) -> Option<Ty> {
    let s = deref(schemas, s)?;
    // Built-in kinds say so by format, custom resources by extension.
    if s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || s.get("format").and_then(Value::as_str) == Some("int-or-string")
    {
        return Some(Ty::Dyn);
    }
    match s.get("type").and_then(Value::as_str).unwrap_or("") {
        "array" => {
            let items = s.get("items")?;
            let elem = from_schema(
                schemas,
                items,
                &format!("{name}.@idx"),
                embedded(schemas, items),
            )?;
            Some(Ty::list(elem))
        }
        "object" => {
            if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                let v = from_schema(schemas, ap, &format!("{name}.@elem"), embedded(schemas, ap))?;
                return Some(Ty::map(Ty::String, v));
            }
            Some(Ty::Obj(Arc::new(Obj {
                name: name.to_string(),
                fields: OnceLock::new(),
                from: Some((schemas.clone(), s, root)),
            })))
        }
        "string" => Some(match s.get("format").and_then(Value::as_str) {
            Some("byte") => Ty::Bytes,
            Some("duration") => Ty::Duration,
            Some("date") | Some("date-time") => Ty::Timestamp,
            _ => Ty::String,
        }),
        "boolean" => Some(Ty::Bool),
        "number" => Some(Ty::Double),
        "integer" => Some(Ty::Int),
        _ => None,
    }
}

fn object_fields(
    schemas: &Arc<Schemas>,
    s: &Value,
    name: &str,
    root: bool,
) -> BTreeMap<String, Ty> {
    let mut fields = BTreeMap::new();
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            let Some(field) = escape(k) else { continue };
            let t = from_schema(schemas, p, &format!("{name}.{field}"), embedded(schemas, p));
            if let Some(t) = t {
                fields.insert(field, t);
            }
        }
    }
    if root {
        with_type_and_meta(&mut fields, name);
    }
    fields
}

/// `WithTypeAndObjectMeta`: a resource's root always has `kind`, `apiVersion` and
/// `metadata.name`/`generateName`.
fn with_type_and_meta(fields: &mut BTreeMap<String, Ty>, name: &str) {
    let has_meta = matches!(fields.get("metadata"), Some(Ty::Obj(m))
        if m.fields().get("name") == Some(&Ty::String) && m.fields().get("generateName") == Some(&Ty::String));
    if has_meta
        && fields.get("kind") == Some(&Ty::String)
        && fields.get("apiVersion") == Some(&Ty::String)
    {
        return;
    }
    fields.insert("kind".into(), Ty::String);
    fields.insert("apiVersion".into(), Ty::String);
    let meta = Ty::obj(
        &format!("{name}.metadata"),
        vec![("name", Ty::String), ("generateName", Ty::String)],
    );
    fields.insert("metadata".into(), meta);
}

/// `BuildRequestType`: the `request` variable.
pub fn request() -> Ty {
    let gvk = || {
        Ty::obj(
            "kubernetes.GroupVersionKind",
            vec![
                ("group", Ty::String),
                ("version", Ty::String),
                ("kind", Ty::String),
            ],
        )
    };
    let gvr = || {
        Ty::obj(
            "kubernetes.GroupVersionResource",
            vec![
                ("group", Ty::String),
                ("version", Ty::String),
                ("resource", Ty::String),
            ],
        )
    };
    let user = Ty::obj(
        "kubernetes.UserInfo",
        vec![
            ("username", Ty::String),
            ("uid", Ty::String),
            ("groups", Ty::list(Ty::String)),
            ("extra", Ty::map(Ty::String, Ty::list(Ty::String))),
        ],
    );
    Ty::obj(
        "kubernetes.AdmissionRequest",
        vec![
            ("kind", gvk()),
            ("resource", gvr()),
            ("subResource", Ty::String),
            ("requestKind", gvk()),
            ("requestResource", gvr()),
            ("requestSubResource", Ty::String),
            ("name", Ty::String),
            ("namespace", Ty::String),
            ("operation", Ty::String),
            ("userInfo", user),
            ("dryRun", Ty::Bool),
            ("options", Ty::Dyn),
        ],
    )
}

/// `BuildNamespaceType`: the `namespaceObject` variable.
pub fn namespace() -> Ty {
    let strings = || Ty::list(Ty::String);
    let smap = || Ty::map(Ty::String, Ty::String);
    let condition = Ty::obj(
        "kubernetes.NamespaceCondition",
        vec![
            ("status", Ty::String),
            ("type", Ty::String),
            ("lastTransitionTime", Ty::Timestamp),
            ("message", Ty::String),
            ("reason", Ty::String),
        ],
    );
    let metadata = Ty::obj(
        "kubernetes.NamespaceMetadata",
        vec![
            ("name", Ty::String),
            ("generateName", Ty::String),
            ("namespace", Ty::String),
            ("labels", smap()),
            ("annotations", smap()),
            ("UID", Ty::String),
            ("creationTimestamp", Ty::Timestamp),
            ("deletionGracePeriodSeconds", Ty::Int),
            ("deletionTimestamp", Ty::Timestamp),
            ("generation", Ty::Int),
            ("resourceVersion", Ty::String),
            ("finalizers", strings()),
        ],
    );
    Ty::obj(
        "kubernetes.Namespace",
        vec![
            ("metadata", metadata),
            (
                "spec",
                Ty::obj("kubernetes.NamespaceSpec", vec![("finalizers", strings())]),
            ),
            (
                "status",
                Ty::obj(
                    "kubernetes.NamespaceStatus",
                    vec![("conditions", Ty::list(condition)), ("phase", Ty::String)],
                ),
            ),
        ],
    )
}

/// A variable's type as `variables.<name>` shows it (`convertCelTypeToDeclType`): objects
/// become `dyn`, inside lists and maps too.
pub fn as_variable(t: &Ty) -> Ty {
    match t {
        Ty::List(e) => Ty::list(as_variable(e)),
        Ty::Map(k, v) => Ty::map(as_variable(k), as_variable(v)),
        Ty::Obj(_) | Ty::Param(_) | Ty::Error => Ty::Dyn,
        other => other.clone(),
    }
}
