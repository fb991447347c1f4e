//! The API verbs on objects and collections: get, list (with paging), create, update,
//! patch, delete, and a few plain paths.

use crate::api::resources::Kind;
use crate::error::{Error, Result};
use serde_json::Value;
use std::time::Instant;

use super::query::{DeleteOptions, ListOptions, PatchType, Query};
use super::{json_text, Client, Limit, MAX_READ_RETRIES};

/// How many of a shaped list's objects are decoded before they are handed on.
const DECODE_CHUNK: usize = 64;

#[derive(Debug, Clone, Default)]
pub struct ObjectList<T = Value> {
    pub items: Vec<T>,
    pub resource_version: String,
    pub continue_token: Option<String>,
}

/// A list answer as it arrives; only what `ObjectList` keeps is decoded.
#[derive(serde::Deserialize)]
struct ListDoc<T> {
    #[serde(default)]
    metadata: ListMetaDoc,
    #[serde(default = "Option::default")]
    items: Option<Vec<T>>,
}

#[derive(serde::Deserialize, Default)]
struct ListMetaDoc {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

const METADATA_LIST_ACCEPT: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// Decode a list answer; items may borrow from `bytes`.
fn list_doc<'a, T: serde::Deserialize<'a>>(path: &str, bytes: &'a [u8]) -> Result<ObjectList<T>> {
    let doc: ListDoc<T> = serde_json::from_slice(bytes)
        .map_err(|e| Error::Transport(format!("GET {path}: the answer is not a list: {e}")))?;
    let nonempty = |s: String| (!s.is_empty()).then_some(s);
    Ok(ObjectList {
        items: doc.items.unwrap_or_default(),
        resource_version: doc.metadata.resource_version.unwrap_or_default(),
        continue_token: doc.metadata.continue_token.and_then(nonempty),
    })
}

const METADATA_ACCEPT: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

impl Client {
    pub fn get(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Result<Value> {
        self.json("GET", &kind.object_path(ns, name), None)
    }

    pub fn get_metadata(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Result<Value> {
        self.request("GET", &kind.object_path(ns, name), None, METADATA_ACCEPT)
    }

    /// One page (or the whole list when no limit is given).
    pub fn list(&self, kind: &Kind, ns: Option<&str>, opts: &ListOptions) -> Result<ObjectList> {
        let mut items = Vec::new();
        let (resource_version, continue_token) =
            self.list_page_with(kind, ns, opts, &mut |mut some| items.append(&mut some))?;
        Ok(ObjectList {
            items,
            resource_version,
            continue_token,
        })
    }

    /// One page, its items handed to `f` a few at a time as they are decoded when the list is
    /// shaped (`opts.shape`), all at once otherwise. Returns the page's resourceVersion and
    /// continue token.
    fn list_page_with(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &ListOptions,
        f: &mut dyn FnMut(Vec<Value>),
    ) -> Result<(String, Option<String>)> {
        let Some(shape) = &opts.shape else {
            let page: ObjectList = self.list_as(kind, ns, opts)?;
            f(page.items);
            return Ok((page.resource_version, page.continue_token));
        };
        // Each item's text is borrowed from the answer (not copied), decoded, handed on.
        let (path, bytes) = self.list_bytes(kind, ns, opts)?;
        let raw: ObjectList<&serde_json::value::RawValue> = list_doc(&path, &bytes)?;
        let mut chunk = Vec::with_capacity(DECODE_CHUNK.min(raw.items.len()));
        for r in raw.items {
            match crate::api::trim::from_slice(r.get().as_bytes(), shape.trim().fields) {
                Ok(v) => chunk.push(v),
                Err(e) => log::warn!("list {kind}: skipping an item that does not decode: {e}"),
            }
            if chunk.len() == DECODE_CHUNK {
                f(std::mem::replace(
                    &mut chunk,
                    Vec::with_capacity(DECODE_CHUNK),
                ));
            }
        }
        if !chunk.is_empty() {
            f(chunk);
        }
        Ok((raw.resource_version, raw.continue_token))
    }

    /// As `list`, decoding each item as `T`: a caller that needs a few fields of many
    /// objects never holds them whole.
    pub fn list_as<T: serde::de::DeserializeOwned>(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList<T>> {
        let (path, bytes) = self.list_bytes(kind, ns, opts)?;
        list_doc(&path, &bytes)
    }

    /// A list request's path and its answer's bytes.
    fn list_bytes(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<(String, Vec<u8>)> {
        let mut q = Query::default();
        q.opt("labelSelector", opts.label_selector.as_deref());
        q.opt("fieldSelector", opts.field_selector.as_deref());
        q.opt("limit", opts.limit.map(|l| l.to_string()).as_deref());
        q.opt("continue", opts.continue_token.as_deref());
        q.opt("resourceVersion", opts.resource_version.as_deref());
        let path = format!("{}{}", kind.collection_path(ns), q.finish());
        let accept = if opts.metadata_only {
            METADATA_LIST_ACCEPT
        } else {
            "application/json"
        };
        let started = Instant::now();
        let retries = if opts.caller_retries {
            0
        } else {
            MAX_READ_RETRIES
        };
        let limit = if opts.limiter_passed {
            Limit::Passed
        } else {
            Limit::Normal
        };
        let res = self.request_with_retries("GET", &path, None, accept, retries, limit);
        crate::metrics::rest_request_latency(&self.inner.base, "GET", started.elapsed());
        Ok((path, res?))
    }

    /// List every page (client-go pager semantics: pages of `limit`, and on an expired
    /// continue token one un-paginated list instead).
    pub fn list_all(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList> {
        let mut all = Vec::new();
        let resource_version = self.list_pages(kind, ns, opts, |mut items, afresh| {
            if afresh {
                all.clear();
            }
            all.append(&mut items);
        })?;
        Ok(ObjectList {
            items: all,
            resource_version,
            continue_token: None,
        })
    }

    /// As `list_all`, the objects handed to `page` a few at a time as they are decoded (so a
    /// caller that keeps them in another form never holds a whole list decoded; a list from
    /// the watch cache, `resourceVersion=0`, comes as one page whatever the limit).
    /// `page(items, true)` starts the list afresh: once at the start, and once more (with no
    /// items) before the un-paginated list that replaces what was handed before when a
    /// continue token expired. Returns the list's resourceVersion.
    pub fn list_pages(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &ListOptions,
        mut page: impl FnMut(Vec<Value>, bool),
    ) -> Result<String> {
        let mut first = opts.clone();
        first.continue_token = None;
        page(Vec::new(), true);
        let mut each = |items: Vec<Value>| page(items, false);
        let (rv, mut next) = self.list_page_with(kind, ns, &first, &mut each)?;
        // Only the first request was paid for by the caller.
        let opts = &ListOptions {
            limiter_passed: false,
            ..opts.clone()
        };
        while let Some(token) = next {
            let o = ListOptions {
                continue_token: Some(token),
                resource_version: None,
                ..opts.clone()
            };
            match self.list_page_with(kind, ns, &o, &mut each) {
                Ok((_, token)) => next = token,
                Err(e) if e.is_gone() => {
                    let full = ListOptions {
                        limit: None,
                        continue_token: None,
                        ..opts.clone()
                    };
                    page(Vec::new(), true);
                    let mut each = |items: Vec<Value>| page(items, false);
                    let (rv, _) = self.list_page_with(kind, ns, &full, &mut each)?;
                    return Ok(rv);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(rv)
    }

    pub fn create(&self, kind: &Kind, ns: Option<&str>, obj: &Value) -> Result<Value> {
        self.create_shaped(kind, ns, obj, None)
    }

    /// As `create`, the answer decoded to `fields` (see `json_shaped`).
    pub fn create_shaped(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        obj: &Value,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let body = json_text(obj);
        self.json_shaped(
            "POST",
            &kind.collection_path(ns),
            Some(("application/json", &body)),
            fields,
        )
    }

    /// As `create`, for a writer that does not read the answer (Events): the created object
    /// is read off the connection but not decoded. Sent at low priority in the client's QPS
    /// limiter: its token is taken only when no other request of the client waits for one.
    pub fn create_unanswered(&self, kind: &Kind, ns: Option<&str>, obj: &Value) -> Result<()> {
        self.write_unanswered("POST", &kind.collection_path(ns), "application/json", obj)
    }

    /// Send `body` at low priority and read the answer off the connection without decoding it.
    fn write_unanswered(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &Value,
    ) -> Result<()> {
        let body = json_text(body);
        self.request_bytes_limited(
            method,
            path,
            Some((content_type, &body)),
            "application/json",
            Limit::Low,
        )
        .map(|_| ())
    }

    /// PUT the whole object (optimistic concurrency through its resourceVersion).
    pub fn update(&self, kind: &Kind, obj: &Value) -> Result<Value> {
        self.update_shaped(kind, obj, None, None)
    }

    /// PUT the object, or its `subresource`; the answer decoded to `fields`.
    pub fn update_shaped(
        &self,
        kind: &Kind,
        obj: &Value,
        subresource: Option<&str>,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let ns = Some(crate::obj::namespace(obj)).filter(|s| !s.is_empty());
        let body = json_text(obj);
        let mut path = kind.object_path(ns, crate::obj::name(obj));
        if let Some(sub) = subresource {
            path.push('/');
            path.push_str(sub);
        }
        self.json_shaped("PUT", &path, Some(("application/json", &body)), fields)
    }

    /// PUT `<object>/<subresource>` (status, finalize, approval, scale).
    pub fn update_subresource(&self, kind: &Kind, obj: &Value, subresource: &str) -> Result<Value> {
        self.update_shaped(kind, obj, Some(subresource), None)
    }

    pub fn update_status(&self, kind: &Kind, obj: &Value) -> Result<Value> {
        self.update_subresource(kind, obj, "status")
    }

    pub fn patch(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        pt: PatchType,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Value> {
        self.patch_shaped(kind, ns, name, pt, patch, subresource, None)
    }

    /// As `patch`, the answer decoded to `fields`.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_shaped(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        pt: PatchType,
        patch: &Value,
        subresource: Option<&str>,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let path = patch_path(kind, ns, name, pt, subresource);
        let body = json_text(patch);
        self.json_shaped("PATCH", &path, Some((pt.content_type(), &body)), fields)
    }

    /// Server-side apply of `obj` as `field_manager` with `force=true` (a controller's apply:
    /// conflicts with other managers are taken over), the answer decoded to `fields`. `at`:
    /// namespace, name and subresource.
    pub fn apply_shaped(
        &self,
        kind: &Kind,
        at: (Option<&str>, &str, Option<&str>),
        field_manager: &str,
        obj: &Value,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let (ns, name, sub) = at;
        let mut path = kind.object_path(ns, name);
        if let Some(s) = sub {
            path.push('/');
            path.push_str(s);
        }
        let path = format!(
            "{path}?fieldManager={}&force=true",
            super::query::percent_encode(field_manager)
        );
        let body = json_text(obj);
        self.json_shaped(
            "PATCH",
            &path,
            Some((PatchType::Apply.content_type(), &body)),
            fields,
        )
    }

    /// As `patch`, for a writer that does not read the answer, at low priority (see
    /// `create_unanswered`).
    pub fn patch_unanswered(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        pt: PatchType,
        patch: &Value,
    ) -> Result<()> {
        let path = patch_path(kind, ns, name, pt, None);
        self.write_unanswered("PATCH", &path, pt.content_type(), patch)
    }

    pub fn delete(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<()> {
        let body = opts.body();
        let b = body.as_deref().map(|b| ("application/json", b));
        // The answer (the object, or a Status) is not needed: not decoded either.
        self.request_bytes("DELETE", &kind.object_path(ns, name), b, "application/json")
            .map(|_| ())
    }

    /// DELETE, and what the answer says is left: the object when it is still there (being
    /// deleted gracefully, or held by finalizers: the answer is the object with its
    /// `deletionTimestamp`), decoded with `fields` as `update_shaped`; None when it is gone
    /// (the answer is a Status).
    pub fn delete_shaped(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
        fields: Option<&[&str]>,
    ) -> Result<Option<Value>> {
        let body = opts.body();
        let b = body.as_deref().map(|b| ("application/json", b));
        let v = self.json_shaped("DELETE", &kind.object_path(ns, name), b, fields)?;
        let remains = v.get("kind").and_then(Value::as_str) != Some("Status")
            && crate::obj::is_deleting(&v)
            && !crate::obj::name(&v).is_empty();
        Ok(remains.then_some(v))
    }

    /// POST to a subresource (`serviceaccounts/<n>/token`, ...).
    pub fn create_subresource(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        subresource: &str,
        body: &Value,
    ) -> Result<Value> {
        let path = format!("{}/{}", kind.object_path(ns, name), subresource);
        let b = json_text(body);
        self.json("POST", &path, Some(("application/json", &b)))
    }

    /// PUT a JSON body to an arbitrary path (the `scale` subresource of any kind, custom
    /// resources too).
    pub fn put_path(&self, path: &str, body: &Value) -> Result<Value> {
        let b = json_text(body);
        self.json("PUT", path, Some(("application/json", &b)))
    }

    /// GET an arbitrary path (discovery, /healthz).
    pub fn get_path(&self, path: &str) -> Result<Value> {
        self.json("GET", path, None)
    }

    /// A JSON merge patch of an object as `field_manager` (its managedFields entry).
    pub fn merge_patch_as(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
        field_manager: &str,
    ) -> Result<Value> {
        let path = format!(
            "{}?fieldManager={}",
            kind.object_path(ns, name),
            super::query::percent_encode(field_manager)
        );
        let body = json_text(patch);
        let pt = PatchType::Merge;
        self.json_shaped("PATCH", &path, Some((pt.content_type(), &body)), Some(&[]))
    }

    /// GET a path whose answer is not JSON (`/healthz` answers `ok`): Ok when 2xx.
    pub fn get_raw(&self, path: &str) -> Result<String> {
        let url = format!("{}{}", self.inner.base, path);
        let (status, _, body) = self.attempt("GET", &url, path, "*/*", None)?;
        let text = String::from_utf8(body)
            .map_err(|_| Error::Transport(format!("GET {url}: the answer is not UTF-8")))?;
        if (200..300).contains(&status) {
            Ok(text)
        } else {
            Err(Error::api(status, "", text))
        }
    }
}

/// Where a patch goes: the object or its subresource, and for a server-side apply our field
/// manager, forcing conflicts as a controller does.
fn patch_path(
    kind: &Kind,
    ns: Option<&str>,
    name: &str,
    pt: PatchType,
    subresource: Option<&str>,
) -> String {
    let mut path = kind.object_path(ns, name);
    if let Some(s) = subresource {
        path.push('/');
        path.push_str(s);
    }
    if pt == PatchType::Apply {
        path.push_str("?fieldManager=edgekcm&force=true");
    }
    path
}
