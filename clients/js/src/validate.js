// Local validation of a native /v1/send body, mirroring the server's serializers and limits
// (the same checks as the Python client's `_validate.py`).

import { ValidationError } from "./errors.js";
import { MAX_LENGTH, MIN_LENGTH, addressProblem, codePoints, isMailbox } from "./mailbox.js";

const MAX_RECIPIENTS = 50;
const MAX_LIST = 50;
const MAX_REPLY_TO = 10;
const MAX_TEXT = 100000;
const MAX_TEMPLATE_SUBJECT = 1000;
const MAX_TEMPLATE_ID = 100;
const MAX_VARIABLES = 50;
const MAX_VARIABLE_STRING = 2000;
const TEMPLATE_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/;
const VARIABLE_NAME = /^[A-Za-z][A-Za-z0-9_]{0,49}$/;
// Lone surrogates cannot be decoded by the server; a surrogate pair is one code point there.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

const COMMON = ["from", "to", "cc", "bcc", "replyTo"];
const INLINE_FIELDS = [...COMMON, "subject", "text", "html"];
const TEMPLATE_FIELDS = [...COMMON, "template", "subject"];

/**
 * @param {unknown} value
 * @returns {value is Record<string, any>}
 */
export function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/**
 * @param {object} object
 * @param {string} key
 */
export function has(object, key) {
  return Object.prototype.hasOwnProperty.call(object, key);
}

/**
 * @param {object} data
 * @param {string[]} allowed
 */
function rejectUnknown(data, allowed, prefix = "") {
  for (const key of Object.keys(data)) {
    if (!allowed.includes(key)) throw new ValidationError(`${prefix}${key}`, "unknown field");
  }
}

/**
 * @param {unknown} value
 * @param {string} field
 * @param {{ maxLength: number, allowBlank?: boolean }} limits
 * @returns {string}
 */
export function checkString(value, field, { maxLength, allowBlank = true }) {
  if (typeof value !== "string") throw new ValidationError(field, "must be a string");
  if (!allowBlank && value === "") throw new ValidationError(field, "may not be blank");
  if (value.includes("\u0000")) throw new ValidationError(field, "null characters are not allowed");
  if (LONE_SURROGATE.test(value)) throw new ValidationError(field, "surrogate characters are not allowed");
  const length = codePoints(value);
  if (length > maxLength) throw new ValidationError(field, `must be at most ${maxLength} characters (got ${length})`);
  return value;
}

/**
 * @param {unknown} value
 * @param {string} field
 * @returns {string}
 */
function checkMailbox(value, field) {
  if (typeof value !== "string") throw new ValidationError(field, "must be a string");
  if (!isMailbox(value)) {
    throw new ValidationError(
      field,
      `must be an address like name@example.com or Name <name@example.com> (${MIN_LENGTH} to ${MAX_LENGTH} characters)`,
    );
  }
  const problem = addressProblem(value);
  if (problem) throw new ValidationError(field, problem);
  return value;
}

/**
 * @param {unknown} value
 * @param {string} field
 * @param {number} maxItems
 * @returns {string[]}
 */
function checkMailboxList(value, field, maxItems) {
  if (typeof value === "string") return [checkMailbox(value, field)];
  if (!Array.isArray(value)) throw new ValidationError(field, "must be an address or a list of addresses");
  if (value.length < 1 || value.length > maxItems) {
    throw new ValidationError(field, `must hold 1 to ${maxItems} addresses (got ${value.length})`);
  }
  return value.map((item, index) => checkMailbox(item, `${field}[${index}]`));
}

/**
 * @param {unknown} value
 * @param {string} field
 */
function checkVariables(value, field) {
  if (!isObject(value)) throw new ValidationError(field, "must be an object");
  const entries = Object.entries(value);
  if (entries.length > MAX_VARIABLES) {
    throw new ValidationError(field, `may hold at most ${MAX_VARIABLES} variables (got ${entries.length})`);
  }
  for (const [name, item] of entries) {
    if (!VARIABLE_NAME.test(name)) {
      throw new ValidationError(
        field,
        `variable name '${name.slice(0, 60)}' must start with a letter and hold only letters, digits and _ (at most 50 characters)`,
      );
    }
    if (typeof item === "string") {
      checkString(item, `${field}.${name}`, { maxLength: MAX_VARIABLE_STRING });
    } else if (typeof item === "number") {
      if (!Number.isFinite(item) || Math.abs(item) > Number.MAX_SAFE_INTEGER) {
        throw new ValidationError(
          `${field}.${name}`,
          `must be between -${Number.MAX_SAFE_INTEGER} and ${Number.MAX_SAFE_INTEGER}`,
        );
      }
    } else if (typeof item !== "boolean") {
      throw new ValidationError(`${field}.${name}`, "must be a string, a number or a boolean");
    }
  }
}

/** @param {unknown} value */
function checkTemplate(value) {
  if (!isObject(value)) throw new ValidationError("template", "must be an object");
  rejectUnknown(value, ["id", "version", "variables"], "template.");
  if (!has(value, "id")) throw new ValidationError("template.id", "is required");
  checkString(value.id, "template.id", { maxLength: MAX_TEMPLATE_ID, allowBlank: false });
  if (!TEMPLATE_ID.test(value.id)) {
    throw new ValidationError("template.id", "must be a template id or slug (letters, digits, _ and -)");
  }
  if (has(value, "version") && (!Number.isInteger(value.version) || value.version < 1)) {
    throw new ValidationError("template.version", "must be an integer of at least 1");
  }
  if (has(value, "variables")) checkVariables(value.variables, "template.variables");
}

/**
 * Validate a native send body (inline or template variant); returns a copy without undefined fields.
 * @param {unknown} params what the caller passed: anything, checked here
 * @returns {import("./index.js").SendParams}
 */
export function checkSend(params) {
  if (!isObject(params)) throw new ValidationError("", "the send request must be an object");
  const body = Object.fromEntries(Object.entries(params).filter(([, value]) => value !== undefined));
  const isTemplate = has(body, "template");
  rejectUnknown(body, isTemplate ? TEMPLATE_FIELDS : INLINE_FIELDS);
  if (!has(body, "from")) throw new ValidationError("from", "is required");
  checkMailbox(body.from, "from");
  let recipients = 0;
  for (const name of ["to", "cc", "bcc"]) {
    if (has(body, name)) recipients += checkMailboxList(body[name], name, MAX_LIST).length;
  }
  if (has(body, "replyTo")) checkMailboxList(body.replyTo, "replyTo", MAX_REPLY_TO);
  if (isTemplate) {
    checkTemplate(body.template);
    if (has(body, "subject")) checkString(body.subject, "subject", { maxLength: MAX_TEMPLATE_SUBJECT });
  } else {
    if (!has(body, "subject")) throw new ValidationError("subject", "is required");
    checkString(body.subject, "subject", { maxLength: MAX_TEXT });
    for (const name of ["text", "html"]) {
      if (has(body, name)) checkString(body[name], name, { maxLength: MAX_TEXT });
    }
    if (!has(body, "text") && !has(body, "html")) {
      throw new ValidationError("text", "at least one of text or html is required");
    }
  }
  if (recipients === 0) throw new ValidationError("to", "at least one of to, cc or bcc is required");
  if (recipients > MAX_RECIPIENTS) {
    throw new ValidationError("to", `at most ${MAX_RECIPIENTS} recipients in total across to, cc and bcc`);
  }
  return /** @type {import("./index.js").SendParams} */ (body);
}
