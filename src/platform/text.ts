// Text cut to a length in UTF-16 code units, as the API counts `maxLength`, never between the two
// halves of a surrogate pair: the server refuses an unpaired one (no UTF-8 text can hold it).

/** The first `max` code units of `text` at most, one fewer when the last would be half a character. */
export function cutAt(text: string, max: number): string {
  if (text.length <= max) return text;
  const code = text.charCodeAt(max - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}
