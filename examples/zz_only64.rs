use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat};
use sievedb::filter::{key_hash, RibbonPolicy};
fn main() {
    let h: Vec<u64> = (0..1_000_000u64)
        .map(|i| key_hash(&i.to_le_bytes()))
        .collect();
    let k = BuildKnobs {
        format: RibbonFormat::Rows64,
        ..BuildKnobs::default()
    };
    let p = RibbonPolicy::new(10.0);
    let mut v = Vec::new();
    for _ in 0..40 {
        let t = std::time::Instant::now();
        std::hint::black_box(p.build_with(&h, k));
        v.push(t.elapsed().as_nanos() as f64 / 1e6);
    }
    v.sort_by(f64::total_cmp);
    println!("median {:.2} ns/key", v[20]);
}
