// The native client: `new MailService({ apiKey, baseUrl })`, falling back to MAILSERVICE_API_KEY and
// MAILSERVICE_BASE_URL.

import { ValidationError } from "./errors.js";
import { idempotencyHeaders, request, resolveConfig } from "./http.js";
import { checkSend, checkString } from "./validate.js";

export * from "./errors.js";

/** @param {import("./index.js").ListOptions} [options] */
function listQuery({ limit, after, direction } = {}) {
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 1 || limit > 100)) {
    throw new ValidationError("limit", "must be an integer from 1 to 100");
  }
  if (after !== undefined && (typeof after !== "string" || after.length < 1 || after.length > 512)) {
    throw new ValidationError("after", "must be a string of 1 to 512 characters");
  }
  if (direction !== undefined && direction !== "sent" && direction !== "received") {
    throw new ValidationError("direction", "must be 'sent' or 'received'");
  }
  return { limit, after, direction };
}

class Messages {
  /** @type {import("./http.js").Config} */
  #config;

  /** @param {import("./http.js").Config} config */
  constructor(config) {
    this.#config = config;
  }

  /**
   * One page: `{ data, has_more, next_cursor }`.
   * @param {import("./index.js").ListOptions} [options]
   * @returns {Promise<import("./index.js").MessageList>}
   */
  async list(options = {}) {
    return (await request(this.#config, "GET", "/v1/messages", { query: listQuery(options) })).data;
  }

  /**
   * Every message, newest first, fetching page after page (`limit` per request) by `next_cursor`:
   * `for await (const message of client.messages.iter())`. The Python client's `messages.iter` is the same.
   * @param {Omit<import("./index.js").ListOptions, "after">} [options]
   */
  async *iter({ limit, direction } = {}) {
    /** @type {string | undefined} */
    let after;
    for (;;) {
      const page = await this.list({ limit, after, direction });
      yield* page.data;
      after = page.next_cursor ?? undefined;
      if (!page.has_more || !after) return;
    }
  }

  /**
   * @param {string} id
   * @returns {Promise<import("./index.js").Message>}
   */
  async get(id) {
    checkString(id, "id", { maxLength: 256, allowBlank: false });
    return (await request(this.#config, "GET", `/v1/messages/${encodeURIComponent(id)}`)).data;
  }
}

const SUPPRESSION_REASONS = ["hard_bounce", "soft_bounce", "complaint", "manual"];
const EVENT_TYPES = [
  "email.accepted",
  "email.delivered",
  "email.delayed",
  "email.bounced",
  "email.complained",
  "email.failed",
  "email.suppressed",
  "email.received",
];

/** @param {string} email */
function suppressionPath(email) {
  checkString(email, "email", { maxLength: 320, allowBlank: false });
  return `/v1/suppressions/${encodeURIComponent(email)}`;
}

/** @param {import("./index.js").SuppressionListOptions} [options] */
function suppressionQuery({ limit, after, reason, email } = {}) {
  const query = listQuery({ limit, after });
  if (reason !== undefined && !SUPPRESSION_REASONS.includes(reason)) {
    throw new ValidationError("reason", `must be one of ${SUPPRESSION_REASONS.join(", ")}`);
  }
  if (email !== undefined) checkString(email, "email", { maxLength: 320, allowBlank: false });
  return { ...query, reason, email };
}

/** @param {import("./index.js").EventListOptions} [options] */
function eventQuery({ limit, after, types, since } = {}) {
  const query = listQuery({ limit, after });
  if (types !== undefined && (!Array.isArray(types) || types.some((kind) => !EVENT_TYPES.includes(kind)))) {
    throw new ValidationError("type", `must be an array of ${EVENT_TYPES.join(", ")}`);
  }
  const when = since instanceof Date ? since.toISOString() : since;
  if (when !== undefined) checkString(when, "since", { maxLength: 64, allowBlank: false });
  return { ...query, type: types, since: when };
}

class Suppressions {
  /** @type {import("./http.js").Config} */
  #config;

  /** @param {import("./http.js").Config} config */
  constructor(config) {
    this.#config = config;
  }

  /**
   * One page of the key's side of the list, newest first.
   * @param {import("./index.js").SuppressionListOptions} [options]
   * @returns {Promise<import("./index.js").SuppressionList>}
   */
  async list(options = {}) {
    return (await request(this.#config, "GET", "/v1/suppressions", { query: suppressionQuery(options) })).data;
  }

  /**
   * Every suppression, newest first, page after page.
   * @param {Omit<import("./index.js").SuppressionListOptions, "after" | "email">} [options]
   */
  async *iter({ limit, reason } = {}) {
    /** @type {string | undefined} */
    let after;
    for (;;) {
      const page = await this.list({ limit, after, reason });
      yield* page.data;
      after = page.next_cursor ?? undefined;
      if (!page.has_more || !after) return;
    }
  }

  /**
   * @param {string} email
   * @returns {Promise<import("./index.js").Suppression>}
   */
  async get(email) {
    return (await request(this.#config, "GET", suppressionPath(email))).data;
  }

  /**
   * A `manual` suppression (suppressions.write); an address already suppressed resolves to its entry unchanged.
   * @param {string} email
   * @param {{ detail?: string }} [options]
   * @returns {Promise<import("./index.js").Suppression>}
   */
  async add(email, { detail } = {}) {
    const path = suppressionPath(email);
    if (detail !== undefined) checkString(detail, "detail", { maxLength: 500 });
    return (await request(this.#config, "PUT", path, { body: detail === undefined ? {} : { detail } })).data;
  }

  /**
   * The next send to the address goes out (suppressions.write); a NotFoundError when it is not suppressed.
   * @param {string} email
   * @returns {Promise<void>}
   */
  async remove(email) {
    await request(this.#config, "DELETE", suppressionPath(email));
  }
}

export class MailService {
  /** @type {import("./http.js").Config} */
  #config;

  /** @param {import("./index.js").MailServiceOptions} [options] */
  constructor({ apiKey, baseUrl, timeout } = {}) {
    this.#config = resolveConfig({ apiKey, baseUrl, timeout });
    this.messages = new Messages(this.#config);
    this.suppressions = new Suppressions(this.#config);
  }

  /**
   * Every event of a message, oldest first, each exactly its webhook's body (`id` is its webhook-id).
   * @param {string} id
   * @returns {Promise<import("./index.js").Event[]>}
   */
  async messageEvents(id) {
    checkString(id, "id", { maxLength: 256, allowBlank: false });
    return (await request(this.#config, "GET", `/v1/messages/${encodeURIComponent(id)}/events`)).data.data;
  }

  /**
   * One page of the domain's events, oldest first.
   * @param {import("./index.js").EventListOptions} [options]
   * @returns {Promise<import("./index.js").EventList>}
   */
  async eventsPage(options = {}) {
    return (await request(this.#config, "GET", "/v1/events", { query: eventQuery(options) })).data;
  }

  /**
   * The domain's events, oldest first, page after page from `after` (a page's next_cursor) or the start:
   * `for await (const event of client.events({ since }))`.
   * @param {import("./index.js").EventListOptions} [options]
   */
  async *events({ limit, after, types, since } = {}) {
    for (;;) {
      const page = await this.eventsPage({ limit, after, types, since });
      yield* page.data;
      after = page.next_cursor ?? undefined;
      if (!page.has_more || !after) return;
    }
  }

  /**
   * Send one message; `params` are the wire fields (`from`, `to`, `subject`, `text`, `template`, ...).
   * With `idempotencyKey`, a retry with the same key and params returns the first answer instead of sending again.
   * @param {import("./index.js").SendParams} params
   * @param {{ idempotencyKey?: string }} [options]
   * @returns {Promise<import("./index.js").SendResult>}
   */
  async send(params, { idempotencyKey } = {}) {
    const headers = idempotencyHeaders(idempotencyKey);
    return (await request(this.#config, "POST", "/v1/send", { body: checkSend(params), headers })).data;
  }

  /**
   * Send 1 to 500 messages in one request, all or none; each is what `send` takes. Resolves to each
   * message's `{ id, created_at }` in the order given; a refused item is named (`messages.3.to`).
   * @param {import("./index.js").SendParams[]} messages
   * @param {{ idempotencyKey?: string }} [options]
   * @returns {Promise<import("./index.js").SendResult[]>}
   */
  async sendBatch(messages, { idempotencyKey } = {}) {
    const headers = idempotencyHeaders(idempotencyKey);
    const body = { messages: checkBatch(messages) };
    return (await request(this.#config, "POST", "/v1/send/batch", { body, headers })).data.data;
  }
}

const MAX_BATCH = 500; // the service's default MAILSERVICE_BATCH_MAX; a server set lower answers 400 itself

/**
 * Each send checked as `send` checks it, the error naming the item.
 * @param {unknown} messages
 * @returns {import("./index.js").SendParams[]}
 */
function checkBatch(messages) {
  if (!Array.isArray(messages) || messages.length < 1 || messages.length > MAX_BATCH) {
    throw new ValidationError("messages", `must be an array of 1 to ${MAX_BATCH} sends`);
  }
  return messages.map((params, index) => {
    try {
      return checkSend(params);
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      throw new ValidationError(`messages.${index}${error.field ? `.${error.field}` : ""}`, error.reason);
    }
  });
}

export { checkSend as toSendRequest };
