//! Plain-text tables for the commands' text output.

/// Left-aligned columns two spaces apart, one line per row, no trailing blanks.
pub fn render<R: AsRef<[String]>>(rows: &[R]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.as_ref().iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(x) => *x = (*x).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.as_ref().iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[i] - cell.chars().count();
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align() {
        let rows = vec![
            vec!["a".to_string(), "bb".into(), "c".into()],
            vec!["ddd".to_string(), "e".into(), "".into()],
        ];
        assert_eq!(super::render(&rows), "a    bb  c\nddd  e\n");
    }
}
