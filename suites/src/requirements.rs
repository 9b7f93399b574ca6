//! The numbered requirements, as data. They are written in one place, the table of
//! `suites/REQUIREMENTS.md`, which `build.rs` compiles in: a new requirement is a new row there.

/// One requirement: its id, its text, and the report it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub id: &'static str,
    pub text: &'static str,
    pub source: &'static str,
}

/// Every requirement, in order: the rows of `REQUIREMENTS.md`'s table, compiled in by
/// `build.rs`.
pub const REQUIREMENTS: &[Requirement] = include!(concat!(env!("OUT_DIR"), "/requirements.rs"));

pub fn find(id: &str) -> Option<&'static Requirement> {
    REQUIREMENTS.iter().find(|r| r.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_requirements_md_is_a_requirement_with_its_text_and_source() {
        let md = include_str!("../REQUIREMENTS.md");
        let rows = md.lines().filter(|l| l.starts_with("| R")).count();
        assert_eq!(REQUIREMENTS.len(), rows);
        let r1 = find("R1").expect("R1 is listed");
        assert!(r1.text.starts_with("Before workload activation"), "{r1:?}");
        assert!(r1.source.starts_with("bug 1"), "{r1:?}");
        for r in REQUIREMENTS {
            let row = format!("| {} | {} | {} |", r.id, r.text, r.source);
            assert!(
                md.lines().any(|l| l == row),
                "{row} is not a row of the table"
            );
        }
    }

    #[test]
    fn requirement_ids_are_numbered_without_gaps() {
        for (i, r) in REQUIREMENTS.iter().enumerate() {
            assert_eq!(r.id, format!("R{}", i + 1));
        }
        let last = REQUIREMENTS.len();
        assert!(find(&format!("R{last}")).is_some());
        assert!(find(&format!("R{}", last + 1)).is_none());
    }
}
