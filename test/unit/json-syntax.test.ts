// Where JSON text stops being JSON: the offset a malformed_json problem turns into a line and column.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { syntaxErrorOffset } from '../../src/http/json-syntax.js';

const parses = (text: string): boolean => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

describe('syntaxErrorOffset', () => {
  it('points at the first character no JSON text could have there, or at the end', () => {
    for (const [text, at] of [
      ['{"a":1,}', 7], // a trailing comma: the closing brace
      ['[1,]', 3],
      ['{"a":1}}', 7], // text after the value
      ['{"name":x}', 8], // a bare word
      ['{"a"\n :,}', 7],
      ['{"a": "b\u0001"}', 8], // a raw control character in a string
      ['{"a":tru}', 8],
      ['{"a":01}', 6], // a leading zero
      ['{"a":"\\x"}', 7], // an escape JSON does not have
      ['{"a":"\\u12g4"}', 8],
      ['{\'a\':1}', 1], // single quotes
      ['-', 1],
      ['{"a":[1,2', 9], // the end, before the value is complete
      ['', 0],
    ] as const) {
      assert.equal(parses(text), false, text);
      assert.equal(syntaxErrorOffset(text), at, text);
    }
  });

  it('finds nothing wrong where JSON.parse finds nothing wrong, and something wherever it does', () => {
    const valid = ['{}', '[]', '"s"', '0', '-0.5e+10', ' {"a" : [true, false, null, {"b": "\\u00e9\\n\\"x\\""}]} ', '[1E3,2e-1,-3]'];
    for (const text of valid) assert.equal(syntaxErrorOffset(text), -1, text);
    // Every one-character change of valid texts: the two agree on whether it is JSON.
    const alphabet = ['{', '}', '[', ']', '"', ',', ':', '\\', '-', '+', '.', 'e', '0', '1', 't', ' ', '\n', '\u0001', 'x'];
    for (const text of valid) {
      for (let i = 0; i <= text.length; i++) {
        for (const c of alphabet) {
          for (const changed of [text.slice(0, i) + c + text.slice(i + 1), text.slice(0, i) + c + text.slice(i), text.slice(0, i) + text.slice(i + 1)]) {
            assert.equal(syntaxErrorOffset(changed) === -1, parses(changed), JSON.stringify(changed));
          }
        }
      }
    }
  });
});
