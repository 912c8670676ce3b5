// Plain-text table rendering: no dependencies, fixed-width columns.

export interface Column {
  title: string;
  align: 'left' | 'right';
}

export function renderTable(columns: Column[], rows: string[][], separatorAfter: number[] = []): string {
  const widths = columns.map((c, i) => Math.max(c.title.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells
      .map((cell, i) => (columns[i]!.align === 'right' ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  const out = [line(columns.map((c) => c.title)), rule];
  rows.forEach((r, i) => {
    out.push(line(r));
    if (separatorAfter.includes(i)) out.push(rule);
  });
  return out.join('\n');
}

const grouped = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

export function formatRate(x: number | undefined): string {
  if (x === undefined || !Number.isFinite(x)) return '-';
  return x >= 100 ? grouped.format(x) : x.toFixed(1);
}

export function formatMs(x: number | undefined): string {
  if (x === undefined || !Number.isFinite(x)) return '-';
  if (x < 10) return x.toFixed(2);
  if (x < 100) return x.toFixed(1);
  return grouped.format(x);
}

export function formatPct(x: number | undefined): string {
  return x === undefined || !Number.isFinite(x) ? '-' : `${Math.round(x)}%`;
}
