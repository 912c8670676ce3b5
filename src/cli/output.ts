// Human output as aligned columns; --json prints the same data for scripts.

/**
 * Text from the server (a log line a service printed, a lock's reason, a refusal's detail) as it may
 * go to a terminal: control characters but the tab, escape sequences' ESC included, shown as \xNN,
 * and the marks that reorder text or break lines unseen (bidirectional marks, overrides and
 * isolates, line and paragraph separators, the zero-width no-break space), shown as \u{NNNN},
 * instead of sent, so that what others wrote cannot move the cursor, rewrite lines already printed,
 * retitle the window, reach the clipboard or read otherwise than it is, for whoever reads it.
 * JSON output, for programs, needs none of this: JSON.stringify escapes the control characters.
 */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]/g, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u{${code.toString(16)}}`;
  });
}

/** A command's failure after the API answered (or a signal), said as main.ts says failures; 1. */
export function failed(json: boolean, code: string, message: string, deployment?: string, extras: Record<string, unknown> = {}): number {
  process.stderr.write(json ? `${JSON.stringify({ error: { code, ...extras, message, ...(deployment !== undefined ? { deployment } : {}) } })}\n` : `slipway: ${printable(message)}\n`);
  return 1;
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

export function printTable(rows: Array<Record<string, string | number | boolean | null>>, columns: string[]): void {
  if (rows.length === 0) {
    process.stdout.write('(none)\n');
    return;
  }
  const cells = rows.map((r) => columns.map((c) => printable(String(r[c] ?? ''))));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)));
  const line = (values: string[]) => values.map((v, i) => v.padEnd(widths[i]!)).join('  ').trimEnd() + '\n';
  process.stdout.write(line(columns.map((c) => c.toUpperCase())));
  for (const row of cells) process.stdout.write(line(row));
}

export function printFields(fields: Record<string, unknown>): void {
  const width = Math.max(...Object.keys(fields).map((k) => k.length));
  for (const [key, value] of Object.entries(fields)) process.stdout.write(`${key.padEnd(width)}  ${printable(String(value))}\n`);
}

/** Help text rows (`--flag ARG`, its variable, what it does) in columns as wide as their widest cell. */
export function flagTable(rows: Array<[string, string, string]>): string {
  const widths = [0, 1].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map(([flag, variable, text]) => `  ${flag.padEnd(widths[0]!)}  ${variable.padEnd(widths[1]!)}  ${text}`.trimEnd() + '\n').join('');
}

/** "3 s ago", "5 min ago", "2 h ago", "4 d ago": how long since `at`. */
export function ago(at: string, now = Date.now()): string {
  const seconds = Math.max(0, Math.round((now - Date.parse(at)) / 1000));
  if (seconds < 120) return `${seconds} s ago`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 172_800) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86_400)} d ago`;
}
