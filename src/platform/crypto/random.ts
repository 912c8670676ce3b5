// Small random values (nonces, id suffixes) drawn from a pooled CSPRNG buffer: a bulk write makes
// thousands of them per request, and one call into the CSPRNG per 8 KiB is much cheaper than one
// per value. Each pool is filled fresh and never reused, so a returned slice never changes.
import { randomFillSync } from 'node:crypto';

const POOL_BYTES = 8192;
let pool = Buffer.alloc(0);
let offset = 0;

export function randomBytesPooled(size: number): Buffer {
  if (size > POOL_BYTES / 8) return randomFillSync(Buffer.allocUnsafe(size));
  if (offset + size > pool.length) {
    pool = randomFillSync(Buffer.allocUnsafe(POOL_BYTES));
    offset = 0;
  }
  const out = pool.subarray(offset, offset + size);
  offset += size;
  return out;
}
