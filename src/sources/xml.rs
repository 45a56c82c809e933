//! A small, lenient reader for the XML that engines answer (the BOINC client's GUI RPC).
//!
//! It builds an element tree (names, text, children; attributes are skipped) without
//! recursion, so hostile nesting cannot overflow the stack, and every error names the byte
//! offset and what was wrong there. It takes what BOINC writes: `<?xml ...?>` headers,
//! comments, self-closing tags, the five named entities and numeric references.

/// An element: its name, its text (entities decoded, trimmed) and its child elements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Element {
    /// Tag name.
    pub name: String,
    /// Text directly inside it, trimmed.
    pub text: String,
    /// Child elements in document order.
    pub children: Vec<Element>,
}

/// Why a document could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed XML at byte {offset}: {problem}")]
pub struct XmlError {
    /// Where in the document.
    pub offset: usize,
    /// What was wrong there.
    pub problem: String,
}

/// Deepest nesting accepted; engine answers use fewer than ten levels.
const MAX_DEPTH: usize = 256;

fn err(offset: usize, problem: impl Into<String>) -> XmlError {
    XmlError {
        offset,
        problem: problem.into(),
    }
}

/// Decodes `&lt;`-style entities and `&#N;`/`&#xN;` references; an unknown one is kept as written.
fn decode(raw: &str) -> String {
    if !raw.contains('&') {
        return raw.to_string();
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let Some(end) = tail.find(';').filter(|&e| e <= 10) else {
            out.push('&');
            rest = &tail[1..];
            continue;
        };
        let entity = &tail[1..end];
        let ch = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        if let Some(c) = ch {
            out.push(c);
            rest = &tail[end + 1..];
        } else {
            out.push('&');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Parses a document with one root element (text around it is ignored).
pub fn parse(doc: &str) -> Result<Element, XmlError> {
    let bytes = doc.as_bytes();
    let mut stack: Vec<(Element, String)> = Vec::new();
    let mut root: Option<Element> = None;
    let mut i = 0;
    while i < bytes.len() {
        let Some(lt) = doc[i..].find('<').map(|p| p + i) else {
            if let Some((_, text)) = stack.last_mut() {
                text.push_str(&doc[i..]);
            }
            break;
        };
        if let Some((_, text)) = stack.last_mut() {
            text.push_str(&doc[i..lt]);
        }
        let rest = &doc[lt..];
        if rest.starts_with("<!--") {
            let end = rest
                .find("-->")
                .ok_or_else(|| err(lt, "a comment that never ends"))?;
            i = lt + end + 3;
            continue;
        }
        if rest.starts_with("<![CDATA[") {
            let end = rest
                .find("]]>")
                .ok_or_else(|| err(lt, "a CDATA section that never ends"))?;
            if let Some((_, text)) = stack.last_mut() {
                // Kept raw: marked so `decode` cannot touch it.
                text.push_str(&rest[9..end].replace('&', "&amp;"));
            }
            i = lt + end + 3;
            continue;
        }
        if rest.starts_with("<?") || rest.starts_with("<!") {
            let end = rest
                .find('>')
                .ok_or_else(|| err(lt, "a declaration that never ends"))?;
            i = lt + end + 1;
            continue;
        }
        let end = rest
            .find('>')
            .ok_or_else(|| err(lt, "a tag that never ends (the answer may be cut off)"))?;
        let inner = &rest[1..end];
        i = lt + end + 1;
        if let Some(name) = inner.strip_prefix('/') {
            let name = name.trim();
            let Some((mut el, text)) = stack.pop() else {
                return Err(err(lt, format!("`</{name}>` closes nothing")));
            };
            if el.name != name {
                return Err(err(
                    lt,
                    format!("`</{name}>` where `</{}>` was expected", el.name),
                ));
            }
            el.text = decode(text.trim());
            attach(&mut stack, &mut root, el, lt)?;
            continue;
        }
        let self_closing = inner.ends_with('/');
        let inner = inner.trim_end_matches('/');
        let name: String = inner
            .chars()
            .take_while(|c| !c.is_whitespace())
            .collect::<String>();
        if name.is_empty() || name.starts_with(|c: char| !(c.is_alphabetic() || c == '_')) {
            return Err(err(lt, format!("`<{inner}>` is not a tag")));
        }
        let el = Element {
            name,
            ..Element::default()
        };
        if self_closing {
            attach(&mut stack, &mut root, el, lt)?;
        } else {
            if stack.len() >= MAX_DEPTH {
                return Err(err(lt, format!("nesting deeper than {MAX_DEPTH} levels")));
            }
            stack.push((el, String::new()));
        }
    }
    if let Some((el, _)) = stack.last() {
        return Err(err(
            doc.len(),
            format!("the document ends inside `<{}>` (cut off?)", el.name),
        ));
    }
    root.ok_or_else(|| err(0, "no element found"))
}

fn attach(
    stack: &mut [(Element, String)],
    root: &mut Option<Element>,
    el: Element,
    at: usize,
) -> Result<(), XmlError> {
    match stack.last_mut() {
        Some((parent, _)) => {
            parent.children.push(el);
            Ok(())
        }
        None if root.is_none() => {
            *root = Some(el);
            Ok(())
        }
        None => Err(err(at, format!("a second root element `<{}>`", el.name))),
    }
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The text of the first child named `name`.
    pub fn text_of(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_str())
    }

    /// Whether a child named `name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.child(name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nested_elements_text_and_entities() {
        let doc = "<?xml version=\"1.0\"?>\n<a x=\"1\">\n <!-- c --><b>x &amp; y &lt;3&#33;</b>\n<c/><b> two </b></a>\n";
        let a = parse(doc).unwrap();
        assert_eq!(a.name, "a");
        assert_eq!(a.text_of("b"), Some("x & y <3!"));
        assert_eq!(a.all("b").count(), 2);
        assert!(a.has("c"));
        assert_eq!(a.children[2].text, "two");
    }

    #[test]
    fn errors_say_where_and_what() {
        let e = parse("<a><b></a>").unwrap_err();
        assert_eq!(e.offset, 6);
        assert!(e.problem.contains("`</b>` was expected"), "{e}");
        let e = parse("<a><b>text").unwrap_err();
        assert!(e.problem.contains("ends inside `<b>`"), "{e}");
        let e = parse("<a><b").unwrap_err();
        assert!(e.problem.contains("never ends"), "{e}");
        assert!(parse("").is_err());
        assert!(parse("</x>").is_err());
        assert!(parse("<a/><b/>").is_err());
        assert!(parse("<1a></1a>").is_err());
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let doc = "<a>".repeat(100_000);
        let e = parse(&doc).unwrap_err();
        assert!(e.problem.contains("deeper"), "{e}");
    }

    #[test]
    fn unknown_entities_stay_as_written() {
        assert_eq!(decode("a &nbsp; b & c &#xZZ;"), "a &nbsp; b & c &#xZZ;");
        assert_eq!(decode("&#x41;&#66;"), "AB");
    }
}
