/**
 * One escaping for every text that reaches a person or a prompt from input (contract R189): the C0
 * and C1 control characters, DEL, the line and paragraph separators and the bidirectional controls
 * (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) become `\uXXXX`, so an echoed name can
 * neither break a line, move the cursor nor reorder what a terminal shows around it.
 */
const UNSAFE = /[\p{Cc}\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/gu;

const escapeOne = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;

/** `text` with every unsafe character written as `\uXXXX`; everything else as it is. */
export function printable(text: string): string {
  return text.replace(UNSAFE, escapeOne);
}

/**
 * `text` as one JSON string literal on one line: JSON.parse gives `text` back exactly, and no
 * unsafe character (above) appears raw in it, not even those JSON.stringify leaves alone.
 */
export function jsonLiteral(text: string): string {
  return JSON.stringify(text).replace(UNSAFE, escapeOne);
}
