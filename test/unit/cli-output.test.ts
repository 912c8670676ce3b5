// What the CLI prints of text from the server: control characters shown, never sent to the terminal.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { printable } from '../../src/cli/output.js';

describe('printable', () => {
  it('shows every control character but the tab as an escape, and leaves other text as it is', () => {
    assert.equal(printable('plain text, tab\there, ünïcödé ✓'), 'plain text, tab\there, ünïcödé ✓');
    assert.equal(printable('a\u001b[2Kb'), 'a\\x1b[2Kb');
    assert.equal(printable('\u0000\u0007\n\r\u007f'), '\\x00\\x07\\x0a\\x0d\\x7f');
    // C1 controls: CSI and OSC by their one-character forms, which some terminals obey.
    assert.equal(printable('\u009b31m\u009d0;t\u009c'), '\\x9b31m\\x9d0;t\\x9c');
    // Marks that reorder what follows, so that text reads otherwise than it is.
    assert.equal(printable('ok \u202egnp.exe\u202c \u2066x\u2069 \u200f \u061c'), 'ok \\u{202e}gnp.exe\\u{202c} \\u{2066}x\\u{2069} \\u{200f} \\u{61c}');
    // Line and paragraph separators, and the zero-width no-break space.
    assert.equal(printable('a\u2028b\u2029c\ufeffd'), 'a\\u{2028}b\\u{2029}c\\u{feff}d');
  });
});
