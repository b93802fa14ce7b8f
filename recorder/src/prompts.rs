//! Prompts: synthetic ones of a calibrated length, unique per request, or lines of a JSONL file.

use crate::error::RecordError;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;

/// Common short words: one token each in most tokenizers, so length scales smoothly.
const WORDS: [&str; 48] = [
    "time", "people", "way", "water", "day", "part", "sound", "work", "place", "year", "back",
    "thing", "name", "man", "line", "right", "boy", "form", "house", "picture", "world", "story",
    "point", "city", "tree", "cross", "farm", "start", "page", "earth", "light", "story", "paper",
    "group", "music", "color", "stand", "river", "car", "feet", "care", "second", "book", "carry",
    "science", "friend", "table", "morning",
];

/// One prompt, ready to put in a request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Plain text (a user message in chat, `prompt` in completions).
    Text(String),
    /// Chat messages as given in a prompt file.
    Messages(Arc<serde_json::Value>),
}

impl Prompt {
    /// The bytes that identify the prompt (its text, or the messages' JSON).
    pub fn identity_bytes(&self) -> Vec<u8> {
        match self {
            Prompt::Text(text) => text.as_bytes().to_vec(),
            Prompt::Messages(m) => serde_json::to_vec(m.as_ref()).unwrap_or_default(),
        }
    }
}

/// Synthetic prompt text for request `id`: a prefix unique to (seed, id) so no two requests
/// share a cacheable prefix, then `words` words drawn from a seeded generator.
pub fn synthetic(seed: u64, id: u64, words: u32) -> String {
    let mix = seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = StdRng::seed_from_u64(mix);
    let mut text = String::with_capacity(words as usize * 7 + 32);
    text.push_str(&format!("{id} {:x}", rng.gen::<u32>()));
    for _ in 0..words {
        text.push(' ');
        text.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
    }
    text
}

/// Read a JSONL prompt file: each non-empty line is `{"prompt": "…"}` or `{"messages": […]}`.
pub fn load_file(path: &Path, chat: bool) -> Result<Vec<Prompt>, RecordError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RecordError::Prompts(format!("reading {}: {e}", path.display())))?;
    let mut prompts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), n + 1);
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| RecordError::Prompts(format!("{}: {e}", at())))?;
        if let Some(prompt) = value.get("prompt").and_then(|p| p.as_str()) {
            prompts.push(Prompt::Text(prompt.to_owned()));
        } else if let Some(messages) = value.get("messages").filter(|m| m.is_array()) {
            if !chat {
                return Err(RecordError::Prompts(format!(
                    "{}: `messages` needs --api chat",
                    at()
                )));
            }
            prompts.push(Prompt::Messages(Arc::new(messages.clone())));
        } else {
            return Err(RecordError::Prompts(format!(
                "{}: expected a \"prompt\" string or a \"messages\" array",
                at()
            )));
        }
    }
    if prompts.is_empty() {
        return Err(RecordError::Prompts(format!(
            "{} holds no prompts",
            path.display()
        )));
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn synthetic_is_deterministic_unique_and_sized() {
        let a = synthetic(7, 1, 100);
        assert_eq!(a, synthetic(7, 1, 100));
        assert_ne!(a, synthetic(7, 2, 100));
        assert_ne!(a, synthetic(8, 1, 100));
        assert_eq!(a.split_whitespace().count(), 102);
        let first = |s: &str| s.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        assert_ne!(first(&a), first(&synthetic(7, 2, 100)));
    }

    #[test]
    fn file_of_prompts_and_messages() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "{{\"prompt\": \"hello there\"}}").unwrap();
        writeln!(f).unwrap();
        writeln!(
            f,
            "{{\"messages\": [{{\"role\":\"user\",\"content\":\"hi\"}}]}}"
        )
        .unwrap();
        let prompts = load_file(f.path(), true).unwrap();
        assert_eq!(prompts.len(), 2);
        assert_eq!(prompts[0], Prompt::Text("hello there".into()));
        assert!(matches!(prompts[1], Prompt::Messages(_)));
        assert!(load_file(f.path(), false).is_err());
    }

    #[test]
    fn bad_line_names_its_position() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "{{\"prompt\": \"ok\"}}\n{{\"x\": 1}}").unwrap();
        let err = load_file(f.path(), true).unwrap_err().to_string();
        assert!(err.contains(":2"), "{err}");
    }
}
