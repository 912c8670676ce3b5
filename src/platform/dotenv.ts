// `.env` text, read by dotenv's rules but for a `#` inside an unquoted value (kept, as Compose does), and written
// so that dotenv, Compose and a shell read it back alike: what the console and `slipway secret` import, and what
// `slipway secret reveal` prints. It imports nothing: the console's page runs this very file.

export interface DotenvProblem {
  /** 1-based. */
  line: number;
  message: string;
}

const ESCAPES: Record<string, string> = { n: '\n', r: '\r', t: '\t', '"': '"', '\\': '\\', $: '$', '`': '`' };

/**
 * Where the quote opened at `open` of `text` closes, or -1. A backslash takes the character after
 * it, but for one just before a quote that could end the value (only spaces and a comment after it
 * on its line), which stands for itself when no later quote on that line ends it: `A="x\\"` is `x\\`,
 * `A="x\\"#"` is `x"#`. Each character is looked at a bounded number of times.
 */
function closingQuote(text: string, open: number): number {
  const quote = text[open]!;
  // The last escaped quote on this line that could end the value read the other way.
  let fallback = -1;
  for (let at = open + 1; at < text.length; at++) {
    const c = text[at];
    if (c === '\n' && fallback >= 0) return fallback;
    if (c === quote) return fallback < 0 || endsLine(text, at + 1) ? at : fallback;
    if (c !== '\\') continue;
    if (text[at + 1] === quote && endsLine(text, at + 2)) fallback = at + 1;
    at++;
  }
  return fallback;
}

/** Whether only spaces, and a `#` comment, are left of the line from `at` on (looking no further than the spaces). */
function endsLine(text: string, at: number): boolean {
  for (; at < text.length; at++) {
    const c = text[at]!;
    if (c === '\n' || c === '#') return true;
    if (!/\s/.test(c)) return false;
  }
  return true;
}

/**
 * `KEY=value` lines, `export` allowed, blank lines and `#` comments skipped, a ` #` comment after an
 * unquoted value dropped (a `#` with no space or tab before it is part of the value, as Compose reads it:
 * `KEY=pa#ss`; `KEY= # note` is empty); single quotes and backquotes keep their text as it is,
 * double quotes expand \n, \r, \t, \", \\, and \$ and \` (a shell's escapes of what it would expand,
 * as dotenv-expand reads \$). A quoted value may go on over lines (a PEM key), up to its closing
 * quote, after which only a comment may follow on that line. Line breaks are \n, \r\n or a lone \r.
 * A line that is none of these, a quote never closed, or a key given twice, is a problem with its
 * line number rather than a value stored otherwise than meant; with any problem, `values` is not to
 * be used.
 */
export function parseDotenv(text: string): { values: Record<string, string>; problems: DotenvProblem[] } {
  const values = new Map<string, string>();
  const problems: DotenvProblem[] = [];
  const firstSeen = new Map<string, number>();
  const source = text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
  // Each character is looked at a bounded number of times: no line takes longer than its length.
  for (let at = 0, line = 1; at < source.length; line++) {
    let eol = source.indexOf('\n', at);
    if (eol < 0) eol = source.length;
    const here = line;
    const raw = source.slice(at, eol);
    at = eol + 1;
    const trimmed = raw.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    const match = /^(?:export\s+)?([^=\s]+)\s*=[^\S\n]*/.exec(raw.trimStart());
    if (!match) {
      problems.push({ line: here, message: 'is not KEY=value' });
      continue;
    }
    const key = match[1]!;
    const valueAt = eol - raw.trimStart().length + match[0].length;
    let value: string;
    const quote = source[valueAt];
    if (quote === '"' || quote === '\'' || quote === '`') {
      const close = closingQuote(source, valueAt);
      if (close < 0) {
        problems.push({ line: here, message: 'has a quote that is not closed' });
        continue;
      }
      const inner = source.slice(valueAt + 1, close);
      // The lines the value took.
      let closeEol = source.indexOf('\n', close);
      if (closeEol < 0) closeEol = source.length;
      for (let k = inner.indexOf('\n'); k >= 0; k = inner.indexOf('\n', k + 1)) line++;
      at = closeEol + 1;
      if (!endsLine(source, close + 1)) {
        problems.push({ line: here, message: `has text after its closing quote${line > here ? ` (on line ${line})` : ''}` });
        continue;
      }
      value = quote === '"' ? inner.replace(/\\(.)/gs, (all, c: string) => ESCAPES[c] ?? all) : inner;
    } else {
      const rest = source.slice(valueAt, eol);
      const comment = rest.startsWith('#') ? 0 : rest.search(/[ \t]#/);
      value = (comment < 0 ? rest : rest.slice(0, comment)).trimEnd();
    }
    const first = firstSeen.get(key);
    if (first !== undefined) {
      problems.push({ line: here, message: `sets ${key} again (first on line ${first})` });
      continue;
    }
    firstSeen.set(key, here);
    values.set(key, value);
  }
  // fromEntries: every key an own property, `__proto__` included.
  return { values: Object.fromEntries(values), problems };
}

/**
 * Characters a value may hold and still be written bare, as parseDotenv reads it back unchanged and
 * as a shell (`set -a; . ./file`) or Compose reads it too: no `$`, backquote or `~`, which they expand.
 */
const BARE = /^[A-Za-z0-9_\-.,:/@+=%^]*$/;

/**
 * What single quotes carry as written, for parseDotenv, dotenv, Compose and a shell alike: no quote
 * of their own, no backslash (parseDotenv would take `\'` for an escaped quote), no control character.
 */
// eslint-disable-next-line no-control-regex
const LITERAL = /^[^'\\\x00-\x1f\x7f]*$/;

/**
 * Values as `.env` lines that parseDotenv reads back to exactly these values: bare when nothing in
 * them needs quotes, else in single quotes, in which nothing is expanded (a `$`, a backquote: a
 * secret revealed into a file that a shell or Compose reads stays as it is, and runs nothing), else
 * (a value with a quote, a backslash or a line break) in double quotes with escapes, `$` and the
 * backquote escaped too: a shell sourcing the file expands nothing there either, and runs nothing
 * (it keeps \n, \r and \t as written, which only a `.env` reader turns into line breaks and tabs).
 */
export function formatDotenv(values: Record<string, string>): string {
  return Object.entries(values).map(([key, value]) => {
    if (BARE.test(value)) return `${key}=${value}\n`;
    if (LITERAL.test(value)) return `${key}='${value}'\n`;
    const escaped = value.replace(/[\\"\n\r\t$`]/g, (c) => ({ '\\': '\\\\', '"': '\\"', '\n': '\\n', '\r': '\\r', '\t': '\\t', $: '\\$', '`': '\\`' })[c]!);
    return `${key}="${escaped}"\n`;
  }).join('');
}
