// `@sendgrid/mail` look-alike: a ready default instance with `setApiKey` and `send(msg)`, sent as a native send.
// Migration: import from "mailservice-client/sendgrid" instead of "@sendgrid/mail"; call `setBaseUrl(url)`
// (or set MAILSERVICE_BASE_URL) next to `setApiKey`. Helper objects and callbacks are not supported.

import { ValidationError } from "./errors.js";
import { request, resolveConfig } from "./http.js";
import { asList, checkLength, nativeSend, require, screen } from "./compat.js";
import { isBareAddress } from "./mailbox.js";
import { checkString } from "./validate.js";

const UNSUPPORTED = [
  "templateId",
  "dynamicTemplateData",
  "personalizations",
  "attachments",
  "headers",
  "categories",
  "customArgs",
  "sendAt",
  "batchId",
  "asm",
  "mailSettings",
  "trackingSettings",
  "ipPoolName",
  "replyToList",
  "content",
  "substitutions",
  "substitutionWrappers",
  "sections",
  "isMultiple",
  "hideWarnings",
];
const FIELDS = ["from", "to", "cc", "bcc", "replyTo", "subject", "text", "html"];
const MAX_SUBJECT = 2000;
const MAX_EMAIL = 254;
const MAX_NAME = 100;

/** A Mailbox string for an address: a string as given, or `{ email, name }` as `name <email>`. */
/**
 * @param {unknown} address
 * @param {string} field
 * @returns {string}
 */
function mailboxOf(address, field) {
  if (typeof address === "string") return address;
  const checked = screen(address, { allowed: ["email", "name"], prefix: `${field}.` });
  const email = require(checked, "email", `${field}.email`);
  checkString(email, `${field}.email`, { maxLength: MAX_EMAIL });
  if (!isBareAddress(email)) throw new ValidationError(`${field}.email`, "must be an email address like name@example.com");
  const name = checkString(checked.name ?? "", `${field}.name`, { maxLength: MAX_NAME });
  if (/[<>\r\n]/.test(name)) throw new ValidationError(`${field}.name`, "must not contain <, >, CR or LF");
  return name ? `${name} <${email}>` : email;
}

/**
 * @param {unknown} value
 * @param {string} field
 */
function addresses(value, field) {
  const list = asList(value);
  if (!Array.isArray(list)) return [mailboxOf(list, field)];
  return list.map((item, index) => mailboxOf(item, `${field}[${index}]`));
}

/**
 * The native send body for `send(msg)`.
 * @param {unknown} msg
 */
export function toSendRequest(msg) {
  const params = screen(msg, { allowed: FIELDS, unsupported: UNSUPPORTED });
  /** @type {Record<string, unknown>} */
  const body = { from: mailboxOf(require(params, "from", "from"), "from") };
  body.to = addresses(require(params, "to", "to"), "to");
  for (const name of ["cc", "bcc"]) {
    if (Object.hasOwn(params, name)) body[name] = addresses(params[name], name);
  }
  if (Object.hasOwn(params, "replyTo")) {
    if (Array.isArray(params.replyTo)) throw new ValidationError("replyTo", "must be one address");
    body.replyTo = [mailboxOf(params.replyTo, "replyTo")];
  }
  const subject = require(params, "subject", "subject");
  checkLength(subject, "subject", { maxLength: MAX_SUBJECT });
  body.subject = subject;
  for (const name of ["text", "html"]) {
    if (Object.hasOwn(params, name)) body[name] = params[name];
  }
  return nativeSend(body, {});
}

export class MailService {
  /** @type {string | undefined} */
  #apiKey;
  /** @type {string | undefined} */
  #baseUrl;

  /** @param {string} apiKey */
  setApiKey(apiKey) {
    this.#apiKey = apiKey;
  }

  /** Where the original uses `client.setDefaultRequest("baseUrl", url)`. */
  /** @param {string} baseUrl */
  setBaseUrl(baseUrl) {
    this.#baseUrl = baseUrl;
  }

  /** Resolves `[{ statusCode: 202, headers: { "x-message-id": id, ... }, body: "" }, ""]`. */
  /**
   * @param {import("./sendgrid.js").MailDataRequired} msg
   * @param {unknown[]} rest
   * @returns {Promise<[import("./sendgrid.js").ClientResponse, ""]>}
   */
  async send(msg, ...rest) {
    if (rest.length > 0) throw new ValidationError("isMultiple", "multiple sends and callbacks are not supported");
    if (Array.isArray(msg)) throw new ValidationError("", "send one message per call");
    const body = toSendRequest(msg);
    const config = resolveConfig({ apiKey: this.#apiKey, baseUrl: this.#baseUrl });
    const reply = await request(config, "POST", "/v1/send", { body });
    return [{ statusCode: 202, headers: { ...reply.headers, "x-message-id": reply.data.id }, body: "" }, ""];
  }
}

export default new MailService();
