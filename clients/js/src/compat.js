// What the four compatibility styles share: field screening, list splitting and error renaming
// (the same rules as the Python client's `compat/_common.py`).

import { ValidationError } from "./errors.js";
import { SPACE, codePoints } from "./mailbox.js";
import { checkSend, isObject } from "./validate.js";

const EDGE_SPACE = new RegExp(`^[${SPACE}]+|[${SPACE}]+$`, "gu");

/**
 * The params without null/undefined values; a named unsupported option or any unknown field is an error.
 * @param {unknown} params
 * @param {{ allowed: string[], unsupported?: string[], prefix?: string }} fields
 * @returns {Record<string, any>}
 */
export function screen(params, { allowed, unsupported = [], prefix = "" }) {
  const prototype = isObject(params) ? Object.getPrototypeOf(params) : undefined;
  if (prototype !== Object.prototype && prototype !== null) {
    throw new ValidationError(prefix.replace(/\.$/, ""), "must be an object (helper objects are not supported)");
  }
  /** @type {Record<string, any>} */
  const kept = {};
  for (const [key, value] of Object.entries(/** @type {object} */ (params))) {
    if (unsupported.includes(key)) throw new ValidationError(`${prefix}${key}`, "is not supported by mailservice");
    if (!allowed.includes(key)) throw new ValidationError(`${prefix}${key}`, "unknown field");
    if (value !== null && value !== undefined) kept[key] = value;
  }
  return kept;
}

/**
 * @param {Record<string, any>} params
 * @param {string} key
 * @param {string} field
 */
export function require(params, key, field) {
  if (!Object.prototype.hasOwnProperty.call(params, key)) throw new ValidationError(field, "is required");
  return params[key];
}

/**
 * A single address becomes a one-item list; anything else is left for the native checks.
 * @param {unknown} value
 */
export function asList(value) {
  return typeof value === "string" ? [value] : value;
}

/**
 * A comma-separated address string as a list (entries trimmed; empty entries are an error).
 * @param {unknown} value
 * @param {string} field
 */
export function splitAddresses(value, field) {
  if (typeof value !== "string") throw new ValidationError(field, "must be a string of comma-separated addresses");
  const entries = value.split(",").map((entry) => entry.replace(EDGE_SPACE, ""));
  entries.forEach((entry, index) => {
    if (!entry) throw new ValidationError(`${field}[${index}]`, "empty address in the comma-separated list");
  });
  return entries;
}

/**
 * @param {unknown} value
 * @param {string} field
 * @param {{ minLength?: number, maxLength: number }} limits
 */
export function checkLength(value, field, { minLength = 0, maxLength }) {
  if (typeof value !== "string") return;
  const length = codePoints(value);
  if (length < minLength || length > maxLength) {
    throw new ValidationError(field, `must be ${minLength} to ${maxLength} characters (got ${length})`);
  }
}

/**
 * Validate the translated body; errors name the caller's fields (`names`: native -> style).
 * @param {unknown} body
 * @param {Record<string, string>} names
 */
export function nativeSend(body, names) {
  try {
    return checkSend(body);
  } catch (error) {
    if (!(error instanceof ValidationError)) throw error;
    const match = /** @type {RegExpExecArray} */ (/^([^.[]*)(.*)$/s.exec(error.field)); // matches any string
    throw new ValidationError((names[match[1]] ?? match[1]) + match[2], error.reason);
  }
}
