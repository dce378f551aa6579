//! The plain-text tables the tools print: figures with thousands grouped, columns aligned.

use std::fmt::Write as _;

/// A figure for a table: thousands separated, decimals only where they matter.
///
/// # Examples
/// ```
/// use tollgate_benches::table::number;
///
/// assert_eq!(number(1_234_567.4), "1,234,567");
/// assert_eq!(number(4.256), "4.26");
/// ```
#[must_use]
pub fn number(value: f64) -> String {
    let decimals = if value.abs() >= 100.0 {
        0
    } else if value.abs() >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{value:.decimals$}");
    let (whole, fraction) = text
        .split_once('.')
        .map_or((text.as_str(), ""), |(w, f)| (w, f));
    let (sign, digits) = whole.strip_prefix('-').map_or(("", whole), |d| ("-", d));
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if fraction.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{fraction}")
    }
}

/// The median of `values`; `None` if empty.
///
/// # Examples
/// ```
/// use tollgate_benches::table::median;
///
/// assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
/// assert_eq!(median(&[1.0, 2.0]), Some(1.5));
/// ```
#[must_use]
pub fn median(values: &[f64]) -> Option<f64> {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[mid]),
        _ => Some((values[mid - 1] + values[mid]) / 2.0),
    }
}

/// Rows of cells as aligned text: the first column left-aligned, the others right-aligned,
/// two spaces apart, one line per row.
#[must_use]
pub fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|row| row.get(i))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[i] - cell.chars().count());
            if i == 0 {
                let _ = write!(out, "{cell}{pad}");
            } else {
                let _ = write!(out, "  {pad}{cell}");
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_and_rounded_by_size() {
        assert_eq!(number(1_234_567.4), "1,234,567");
        assert_eq!(number(999.6), "1,000");
        assert_eq!(number(42.25), "42.2");
        assert_eq!(number(4.256), "4.26");
        assert_eq!(number(-119.0), "-119");
    }

    #[test]
    fn columns_are_aligned() {
        let rows = vec![
            vec!["a".to_owned(), "value".to_owned()],
            vec!["longer".to_owned(), "1".to_owned()],
        ];
        assert_eq!(render(&rows), "a       value\nlonger      1\n");
    }
}
