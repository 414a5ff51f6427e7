// `@aws-sdk/client-sesv2` look-alike: `await client.send(new SendEmailCommand(input))`, sent as a native send.
// Migration: import from "mailservice-client/sesv2" instead of "@aws-sdk/client-sesv2"; the client takes
// `endpoint` (the service's base URL) and `apiKey`, or the MAILSERVICE_* environment.

import { MailServiceError, ValidationError } from "./errors.js";
import { request, resolveConfig } from "./http.js";
import { nativeSend, require, screen } from "./compat.js";

const UNSUPPORTED = [
  "FromEmailAddressIdentityArn",
  "FeedbackForwardingEmailAddress",
  "FeedbackForwardingEmailAddressIdentityArn",
  "EmailTags",
  "ConfigurationSetName",
  "ListManagementOptions",
  "EndpointId",
  "TenantName",
];
const NAMES = {
  from: "FromEmailAddress",
  to: "Destination.ToAddresses",
  cc: "Destination.CcAddresses",
  bcc: "Destination.BccAddresses",
  replyTo: "ReplyToAddresses",
  subject: "Content.Simple.Subject.Data",
  text: "Content.Simple.Body.Text.Data",
  html: "Content.Simple.Body.Html.Data",
};
const DESTINATIONS = { ToAddresses: "to", CcAddresses: "cc", BccAddresses: "bcc" };

/** The service's error in the SDK's shape: `name` is the service's error code; `$metadata` as on success. */
export class SESv2ServiceException extends MailServiceError {
  /** @param {MailServiceError} error one with a response (`status` is set) */
  constructor(error) {
    const status = /** @type {number} */ (error.status);
    super(error.message, { code: error.code, status, requestId: error.requestId, headers: error.headers });
    this.name = error.code;
    this.$fault = status >= 500 ? "server" : "client";
    this.$metadata = { httpStatusCode: status, requestId: error.requestId ?? undefined, attempts: 1, totalRetryDelay: 0 };
  }
}

/**
 * @param {unknown} block
 * @param {string} field
 */
function content(block, field) {
  const checked = screen(block, { allowed: ["Data", "Charset"], prefix: `${field}.` });
  if (Object.hasOwn(checked, "Charset") && checked.Charset !== "UTF-8") {
    throw new ValidationError(`${field}.Charset`, "only UTF-8 is supported");
  }
  return require(checked, "Data", `${field}.Data`);
}

/**
 * The native send body for a SendEmailCommand input.
 * @param {unknown} input
 */
export function toSendRequest(input) {
  const params = screen(input, {
    allowed: ["FromEmailAddress", "Destination", "Content", "ReplyToAddresses"],
    unsupported: UNSUPPORTED,
  });
  /** @type {Record<string, unknown>} */
  const body = { from: require(params, "FromEmailAddress", "FromEmailAddress") };
  const destination = screen(require(params, "Destination", "Destination"), {
    allowed: Object.keys(DESTINATIONS),
    prefix: "Destination.",
  });
  if (Object.keys(destination).length === 0) {
    throw new ValidationError("Destination", "needs at least one of ToAddresses, CcAddresses or BccAddresses");
  }
  for (const [key, name] of Object.entries(DESTINATIONS)) {
    if (!Object.hasOwn(destination, key)) continue;
    if (!Array.isArray(destination[key])) throw new ValidationError(`Destination.${key}`, "must be a list of addresses");
    body[name] = destination[key];
  }
  const contentParams = screen(require(params, "Content", "Content"), {
    allowed: ["Simple"],
    unsupported: ["Raw", "Template"],
    prefix: "Content.",
  });
  const simple = screen(require(contentParams, "Simple", "Content.Simple"), {
    allowed: ["Subject", "Body"],
    unsupported: ["Headers", "Attachments"],
    prefix: "Content.Simple.",
  });
  body.subject = content(require(simple, "Subject", "Content.Simple.Subject"), "Content.Simple.Subject");
  const simpleBody = screen(require(simple, "Body", "Content.Simple.Body"), {
    allowed: ["Text", "Html"],
    prefix: "Content.Simple.Body.",
  });
  if (Object.keys(simpleBody).length === 0) {
    throw new ValidationError("Content.Simple.Body", "needs at least one of Text or Html");
  }
  for (const [key, name] of [["Text", "text"], ["Html", "html"]]) {
    if (Object.hasOwn(simpleBody, key)) body[name] = content(simpleBody[key], `Content.Simple.Body.${key}`);
  }
  if (Object.hasOwn(params, "ReplyToAddresses")) {
    if (!Array.isArray(params.ReplyToAddresses)) {
      throw new ValidationError("ReplyToAddresses", "must be a list of addresses");
    }
    if (params.ReplyToAddresses.length > 0) body.replyTo = params.ReplyToAddresses;
  }
  return nativeSend(body, NAMES);
}

export class SendEmailCommand {
  /** @param {import("./sesv2.js").SendEmailCommandInput} input */
  constructor(input) {
    this.input = input;
  }
}

export class SESv2Client {
  /** @type {import("./http.js").Config} */
  #config;

  /**
   * `region` is accepted and has no effect; no AWS credentials or signatures are used.
   * @param {import("./sesv2.js").SESv2ClientConfig} [config]
   */
  constructor({ endpoint, apiKey, region, timeout } = {}) {
    this.#config = resolveConfig({ apiKey, baseUrl: endpoint, timeout });
    this.config = { region };
  }

  /**
   * @param {import("./sesv2.js").SendEmailCommand} command
   * @returns {Promise<import("./sesv2.js").SendEmailCommandOutput>}
   */
  async send(command) {
    if (!(command instanceof SendEmailCommand)) {
      throw new ValidationError("command", "only SendEmailCommand is supported");
    }
    const body = toSendRequest(command.input);
    let reply;
    try {
      reply = await request(this.#config, "POST", "/v1/send", { body });
    } catch (error) {
      if (error instanceof MailServiceError && error.status !== null) throw new SESv2ServiceException(error);
      throw error;
    }
    return {
      MessageId: reply.data.id,
      $metadata: { httpStatusCode: reply.status, requestId: reply.requestId ?? undefined, attempts: 1, totalRetryDelay: 0 },
    };
  }
}
