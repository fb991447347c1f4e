pub fn rfc3339(t: std::time::SystemTime) -> String {
    let s = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{s}")
} // stand-in
pub fn parse_rfc3339(_s: &str) -> Option<std::time::SystemTime> {
    None
} // stand-in
