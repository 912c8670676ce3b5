// Where JSON text stops being JSON (RFC 8259's grammar), for a refusal that says where without
// quoting the text: V8's JSON.parse gives a position for some errors only ("Unexpected token 'x',
// "…the text…" is not valid JSON" has none, and quotes the body). Run only on text JSON.parse has
// already refused, so its cost is the error path's.

class Stop {
  constructor(readonly at: number) {}
}

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '9';
const ESCAPES = new Set(['"', '\\', '/', 'b', 'f', 'n', 'r', 't']);
const HEX = /^[0-9A-Fa-f]{4}$/;

/** The offset of the first character (or of the end, `text.length`) that no JSON text could have there; -1 if it is JSON. */
export function syntaxErrorOffset(text: string): number {
  let i = 0;
  const space = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  };
  const expect = (c: string) => {
    if (text[i] !== c) throw new Stop(i);
    i++;
  };
  const string = () => {
    expect('"');
    for (;;) {
      const c = text[i];
      if (c === undefined || c < ' ') throw new Stop(i);
      if (c === '"') {
        i++;
        return;
      }
      if (c === '\\') {
        const e = text[i + 1];
        if (e === 'u') {
          if (!HEX.test(text.slice(i + 2, i + 6))) throw new Stop(i + 2);
          i += 6;
        } else if (e !== undefined && ESCAPES.has(e)) i += 2;
        else throw new Stop(i + 1);
      } else i++;
    }
  };
  const digits = () => {
    if (!isDigit(text[i])) throw new Stop(i);
    while (isDigit(text[i])) i++;
  };
  const number = () => {
    if (text[i] === '-') i++;
    if (text[i] === '0') i++;
    else digits();
    if (text[i] === '.') {
      i++;
      digits();
    }
    if (text[i] === 'e' || text[i] === 'E') {
      i++;
      if (text[i] === '+' || text[i] === '-') i++;
      digits();
    }
  };
  // An object's members or an array's items: `item`s between commas, up to `close`.
  const sequence = (close: string, item: () => void) => {
    i++;
    space();
    if (text[i] === close) {
      i++;
      return;
    }
    for (;;) {
      item();
      space();
      if (text[i] === close) {
        i++;
        return;
      }
      expect(',');
    }
  };
  const member = () => {
    space();
    string();
    space();
    expect(':');
    value();
  };
  const value = (): void => {
    space();
    const c = text[i];
    if (c === '{') return sequence('}', member);
    if (c === '[') return sequence(']', value);
    if (c === '"') return string();
    if (c === '-' || isDigit(c)) return number();
    for (const word of ['true', 'false', 'null']) {
      if (c !== word[0]) continue;
      for (const letter of word) expect(letter);
      return;
    }
    throw new Stop(i);
  };
  try {
    value();
    space();
    return i < text.length ? i : -1;
  } catch (stop) {
    if (stop instanceof Stop) return stop.at;
    // Nested deeper than the stack: where is not known.
    return -1;
  }
}
