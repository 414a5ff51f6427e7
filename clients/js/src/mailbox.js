// The service's Mailbox grammar (spec section 2.5), ported from the server's `mailservice/mailbox.py`.
// The server uses Python's `\s`, which is not JavaScript's `\s`: the exact set is spelled out here.
// Lengths count code points, as Python does, not UTF-16 units.

export const MIN_LENGTH = 3;
export const MAX_LENGTH = 320;

export const SPACE = "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
// NUL is refused everywhere, as on the server (PostgreSQL cannot store it).
const ATOM = `[^\\x00${SPACE}<>@,]`;
const ADDRESS = `${ATOM}+@(?=${ATOM}*\\.)${ATOM}+`;
const BARE = new RegExp(`^${ADDRESS}$`, "u");
const WITH_DISPLAY = new RegExp(`^[^\\x00<>\\r\\n]+ <${ADDRESS}>$`, "u");

/**
 * The length of a string in code points (what the server counts).
 * @param {string} value
 */
export function codePoints(value) {
  let count = 0;
  for (const _ of value) count += 1;
  return count;
}

/** @param {string} value */
export function isMailbox(value) {
  const length = codePoints(value);
  if (length < MIN_LENGTH || length > MAX_LENGTH) return false;
  return BARE.test(value) || WITH_DISPLAY.test(value);
}

/** @param {string} value */
export function isBareAddress(value) {
  return BARE.test(value);
}
