use sievedb::filter::{self, FilterPolicy, RibbonPolicy};
#[test]
fn quick() {
    let hashes: Vec<u64> = (0..1_000_000u64).map(|i| filter::key_hash(&i.to_le_bytes())).collect();
    let p = RibbonPolicy::new(10.0);
    let t = std::time::Instant::now();
    let (b, o) = p.build_with_overhead(&hashes, ribbon_oh(), 256);
    eprintln!("build {:?} {:?} bits/key {}", t.elapsed(), o, b.len() as f64 * 8.0 / 1e6);
    let t = std::time::Instant::now();
    let bl = filter::BloomPolicy::new(10.0).build(&hashes);
    eprintln!("bloom build {:?}", t.elapsed());
    for &h in &hashes { assert!(filter::may_contain(&b, h)); }
    let mut fp = 0;
    for i in 0..1_000_000u64 { if filter::may_contain(&b, filter::key_hash(&(i + (1<<40)).to_le_bytes())) { fp += 1; } }
    eprintln!("fp {}", fp as f64 / 1e6);
    let _ = bl;
}
fn ribbon_oh() -> f64 { sievedb::filter::ribbon::overhead_for_keys(1_000_000) }
