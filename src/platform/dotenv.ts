// `.env` text, read and written by dotenv's rules: what the console and `slipway secret` import, and
// what `slipway secret reveal` prints. It imports nothing: the console's page runs this very file.

export interface DotenvProblem {
  /** 1-based. */
  line: number;
  message: string;
}

const ESCAPES: Record<string, string> = { n: '\n', r: '\r', t: '\t', '"': '"', '\\': '\\', $: '$', '`': '`' };

/**
 * `KEY=value` lines, `export` allowed, blank lines and `#` comments skipped, a ` #` comment after an
 * unquoted value dropped (`KEY= # note` is empty); single quotes keep their text as it is, double
 * quotes expand \n, \r, \t, \", \\, and \$ and \` (a shell's escapes of what it would expand, as
 * dotenv-expand reads \$). A line that is none of these, or a key given twice, is a
 * problem with its line number rather than a value stored otherwise than meant; with any problem,
 * `values` is not to be used.
 */
export function parseDotenv(text: string): { values: Record<string, string>; problems: DotenvProblem[] } {
  const values = new Map<string, string>();
  const problems: DotenvProblem[] = [];
  const firstSeen = new Map<string, number>();
  text.replace(/^\uFEFF/, '').split(/\r?\n/).forEach((raw, index) => {
    const line = index + 1;
    const trimmed = raw.trim();
    if (trimmed === '' || trimmed.startsWith('#')) return;
    const match = /^(?:export\s+)?([^=\s]+)\s*=\s*(.*)$/s.exec(trimmed);
    if (!match) {
      problems.push({ line, message: 'is not KEY=value' });
      return;
    }
    const key = match[1]!;
    const rest = match[2]!;
    let value: string;
    // `s`: a quoted value may hold any character but the line break that ends it (U+2028 too). A
    // backslash takes the character after it, but for one just before the closing quote, which
    // stands for itself: one way only to read each, so that no line takes longer than its length
    // (a backslash that could go either way made a line of 40 take seconds).
    const quoted = /^(['"])((?:\\.|[^\\'"]|(?!\1)['"]|\\(?=\1\s*(?:#.*)?$))*)\1\s*(?:#.*)?$/s.exec(rest);
    if (quoted) value = quoted[1] === '"' ? quoted[2]!.replace(/\\(.)/gs, (all, c: string) => ESCAPES[c] ?? all) : quoted[2]!;
    else if (/^['"]/.test(rest)) {
      problems.push({ line, message: 'has a quote that is not closed on the line (or text after the closing quote)' });
      return;
    } else value = rest.startsWith('#') ? '' : rest.replace(/\s+#.*$/s, '');
    const first = firstSeen.get(key);
    if (first !== undefined) {
      problems.push({ line, message: `sets ${key} again (first on line ${first})` });
      return;
    }
    firstSeen.set(key, line);
    values.set(key, value);
  });
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
