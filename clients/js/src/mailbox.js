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

// What the server further requires of the address (`parse_address` in mailservice/mailbox.py): a
// local part that SMTP carries as written, and a host name. IDNA 2008 validity of a non-ASCII
// domain is left to the server; everything else is checked here as the Python client does.
const ATEXT = "A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-";
const ASCII_DOT_ATOM = new RegExp(`^[${ATEXT}]+(?:\\.[${ATEXT}]+)*$`, "u");
const UTF8_DOT_ATOM = new RegExp(`^[\\u{80}-\\u{10ffff}${ATEXT}]+(?:\\.[\\u{80}-\\u{10ffff}${ATEXT}]+)*$`, "u");
const QUOTED_STRING = /^"((?:[^"\\]|\\.)+)"$/su;
const QUOTED_PAIR = /\\(.)/gsu;
const LDH_HOST = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$/;
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}]/u;
const ASCII = /^[\x00-\x7f]*$/;

/**
 * Why a valid Mailbox cannot be sent as written, or null (the server's rules, same messages).
 * @param {string} value
 * @returns {string | null}
 */
export function addressProblem(value) {
  const match = WITH_DISPLAY.test(value) ? value.slice(value.lastIndexOf("<") + 1, -1) : value;
  const at = match.lastIndexOf("@");
  const local = match.slice(0, at);
  const domain = match.slice(at + 1);
  const quoted = QUOTED_STRING.exec(local);
  let content;
  if (quoted) content = quoted[1].replace(QUOTED_PAIR, "$1");
  else if (ASCII_DOT_ATOM.test(local) || (!ASCII.test(local) && UTF8_DOT_ATOM.test(local))) content = local;
  else return "the part before @ must be a dot-atom or a quoted-string";
  if (INVISIBLE.test(content)) return "the part before @ contains an invisible or control character";
  if (!ASCII.test(content) && content.normalize("NFC") !== content) {
    return "the part before @ must be in Unicode normalization form NFC (RFC 6532)";
  }
  if (ASCII.test(domain) && !(domain.startsWith("[") && domain.endsWith("]"))) {
    if (domain.length > 253 || !LDH_HOST.test(domain.toLowerCase())) return "the domain is not a valid host name";
  }
  return null;
}
