//! The XML that engines answer (the BOINC client's GUI RPC), read with quick-xml into a
//! small element tree (names, text, children; attributes are skipped). This is the glue:
//! the tree is built without recursion and nesting is capped, so hostile nesting cannot
//! overflow the stack; every error names the byte offset and what was wrong there; and
//! it stays lenient where BOINC is loose (a bare `&`, entities XML does not define).

use quick_xml::Reader;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;

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

/// Appends what an entity or character reference stands for; one this reader does not
/// know (`&nbsp;`, a bad `&#xZZ;`) is kept as written.
fn push_ref(text: &mut String, name: &str) {
    let known = if let Some(num) = name.strip_prefix('#') {
        let n = match num.strip_prefix('x') {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => num.parse().ok(),
        };
        n.and_then(char::from_u32).map(String::from)
    } else {
        resolve_predefined_entity(name).map(str::to_string)
    };
    if let Some(t) = known {
        text.push_str(&t);
    } else {
        text.push('&');
        text.push_str(name);
        text.push(';');
    }
}

/// A tag name, checked to start like one.
fn tag_name(name: &str, at: usize) -> Result<String, XmlError> {
    let name = name.to_string();
    if name.is_empty() || name.starts_with(|c: char| !(c.is_alphabetic() || c == '_')) {
        return Err(err(at, format!("`<{name}>` is not a tag")));
    }
    Ok(name)
}

/// Parses a document with one root element (text around it is ignored).
pub fn parse(doc: &str) -> Result<Element, XmlError> {
    let mut reader = Reader::from_str(doc);
    let config = reader.config_mut();
    // BOINC writes a bare `&` in some texts (project names, messages): kept as text.
    config.allow_dangling_amp = true;
    config.check_end_names = true;
    let mut stack: Vec<(Element, String)> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let at = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let event = reader.read_event().map_err(|e| {
            let offset = usize::try_from(reader.error_position()).unwrap_or(usize::MAX);
            // Syntax errors are things left open at the end of the input.
            let cut = if matches!(e, quick_xml::Error::Syntax(_)) {
                " (the answer may be cut off)"
            } else {
                ""
            };
            err(offset, format!("{e}{cut}"))
        })?;
        match event {
            Event::Start(t) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(err(at, format!("nesting deeper than {MAX_DEPTH} levels")));
                }
                let el = Element {
                    name: tag_name(t.name().as_ref(), at)?,
                    ..Element::default()
                };
                stack.push((el, String::new()));
            }
            Event::Empty(t) => {
                let el = Element {
                    name: tag_name(t.name().as_ref(), at)?,
                    ..Element::default()
                };
                attach(&mut stack, &mut root, el, at)?;
            }
            Event::End(_) => {
                // quick-xml has checked that it closes the open element.
                let Some((mut el, text)) = stack.pop() else {
                    return Err(err(at, "a closing tag that closes nothing"));
                };
                el.text = text.trim().to_string();
                attach(&mut stack, &mut root, el, at)?;
            }
            Event::Text(t) => {
                if let Some((_, text)) = stack.last_mut() {
                    text.push_str(&t);
                }
            }
            Event::CData(t) => {
                if let Some((_, text)) = stack.last_mut() {
                    text.push_str(&t);
                }
            }
            Event::GeneralRef(r) => {
                if let Some((_, text)) = stack.last_mut() {
                    push_ref(text, &r);
                }
            }
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
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
        assert!(e.problem.contains("expected `</b>`"), "{e}");
        let e = parse("<a><b>text").unwrap_err();
        assert!(e.problem.contains("ends inside `<b>`"), "{e}");
        let e = parse("<a><b").unwrap_err();
        assert!(e.problem.contains("cut off"), "{e}");
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
    fn unknown_entities_and_bare_ampersands_stay_as_written() {
        let a = parse("<a>a &nbsp; b & c &#xZZ; &#x41;&#66;</a>").unwrap();
        assert_eq!(a.text, "a &nbsp; b & c &#xZZ; AB");
    }

    #[test]
    fn huge_flat_documents_are_read() {
        let doc = format!("<r>{}</r>", "<t>x</t>".repeat(200_000));
        assert_eq!(parse(&doc).unwrap().children.len(), 200_000);
    }
}
