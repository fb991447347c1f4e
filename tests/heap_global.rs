//! `edgekcm::runtime::heap::Heap` as the process's global allocator (as in the static musl builds),
//! under what edgekcm does most: JSON decoded on one thread and dropped on another, strings
//! and maps of every size, vectors grown by reallocation.

use serde_json::{json, Value};
use std::sync::mpsc;

#[global_allocator]
static ALLOCATOR: edgekcm::runtime::heap::Global = edgekcm::runtime::heap::Global;

fn object(i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("pod-{i}"),
            "namespace": "bench",
            "labels": {"app": format!("app-{}", i % 17), "tier": "x".repeat(i % 300)},
            "annotations": {"note": "y".repeat((i * 7) % 2000)},
            "resourceVersion": i.to_string(),
        },
        "status": {
            "podIPs": (0..(i % 9)).map(|k| json!({"ip": format!("10.0.{k}.{i}")})).collect::<Vec<_>>(),
            "phase": "Running",
        }
    })
}

#[test]
fn json_crosses_threads_intact_on_the_heap() {
    let (tx, rx) = mpsc::channel::<(usize, Vec<u8>, Value)>();
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in (t..4000).step_by(4) {
                    let text = serde_json::to_vec(&object(i)).unwrap();
                    let decoded: Value = serde_json::from_slice(&text).unwrap();
                    tx.send((i, text, decoded)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            let rx = rx.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                loop {
                    let next = rx.lock().unwrap().recv();
                    let Ok((i, text, decoded)) = next else { break };
                    assert_eq!(decoded, object(i), "object {i}");
                    let again: Value = serde_json::from_slice(&text).unwrap();
                    assert_eq!(again, decoded);
                    let mut grown = Vec::new();
                    for k in 0..(i % 700) {
                        grown.push(k as u8);
                    }
                    assert_eq!(grown.len(), i % 700);
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let seen: usize = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(seen, 4000);
    let (_, bytes) = edgekcm::runtime::heap::HEAP.cached();
    // At most 64 KiB in each of the 16 caches and 1 MiB in the depot.
    assert!(bytes <= 16 * 64 * 1024 + 1024 * 1024, "{bytes}");
    edgekcm::runtime::heap::HEAP.release();
    assert_eq!(edgekcm::runtime::heap::HEAP.cached(), (0, 0));
}
