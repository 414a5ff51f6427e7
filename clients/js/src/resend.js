// `resend` look-alike: `new Resend(key, { baseUrl }).emails.send({...})`, sent as a native send.
// Migration: import from "mailservice-client/resend" instead of "resend". HTTP errors come back in
// `error` (never thrown); local validation errors are thrown, before any request.

import { MailServiceError, ValidationError } from "./errors.js";
import { idempotencyHeaders, request, resolveConfig } from "./http.js";
import { asList, checkLength, nativeSend, require, screen } from "./compat.js";

const UNSUPPORTED = ["headers", "attachments", "tags", "scheduledAt", "react", "topicId"];
const FIELDS = ["from", "to", "subject", "cc", "bcc", "replyTo", "text", "html", "template"];
const MAX_SUBJECT = 2000;

/**
 * The native send body for `emails.send(payload)` (plain or template variant).
 * @param {unknown} payload
 */
export function toSendRequest(payload) {
  const params = screen(payload, { allowed: FIELDS, unsupported: UNSUPPORTED });
  /** @type {Record<string, unknown>} */
  const body = { from: require(params, "from", "from"), to: asList(require(params, "to", "to")) };
  for (const name of ["cc", "bcc", "replyTo"]) {
    if (Object.hasOwn(params, name)) body[name] = asList(params[name]);
  }
  for (const name of ["subject", "text", "html", "template"]) {
    if (Object.hasOwn(params, name)) body[name] = params[name];
  }
  if (!Object.hasOwn(params, "template")) {
    checkLength(require(params, "subject", "subject"), "subject", { maxLength: MAX_SUBJECT });
  }
  return nativeSend(body, {});
}

class Emails {
  /** @type {import("./http.js").Config} */
  #config;

  /** @param {import("./http.js").Config} config */
  constructor(config) {
    this.#config = config;
  }

  /**
   * Resolves `{ data: { id }, error: null, headers }`, or `{ data: null, error: { name, message, statusCode }, headers }`.
   * @param {import("./resend.js").CreateEmailOptions | import("./resend.js").CreateTemplateEmailOptions} payload
   * @param {Record<string, unknown>} [options] Resend's request options: only `idempotencyKey` is supported
   */
  async send(payload, options) {
    const { idempotencyKey, ...unsupported } = options ?? {};
    if (Object.keys(unsupported).length > 0) {
      throw new ValidationError(`options.${Object.keys(unsupported)[0]}`, "is not supported by mailservice");
    }
    const headers = idempotencyHeaders(idempotencyKey, "options.idempotencyKey");
    const body = toSendRequest(payload);
    try {
      const reply = await request(this.#config, "POST", "/v1/send", { body, headers });
      return { data: { id: reply.data.id }, error: null, headers: reply.headers };
    } catch (error) {
      if (!(error instanceof MailServiceError)) throw error;
      return {
        data: null,
        error: { name: error.code, message: error.message, statusCode: error.status, requestId: error.requestId },
        headers: error.status === null ? null : error.headers,
      };
    }
  }

  /**
   * @param {import("./resend.js").CreateEmailOptions | import("./resend.js").CreateTemplateEmailOptions} payload
   * @param {Record<string, unknown>} [options]
   */
  create(payload, options) {
    return this.send(payload, options);
  }
}

export class Resend {
  /**
   * @param {string} [key]
   * @param {{ baseUrl?: string }} [options]
   */
  constructor(key, { baseUrl } = {}) {
    this.emails = new Emails(resolveConfig({ apiKey: key, baseUrl }));
  }
}
