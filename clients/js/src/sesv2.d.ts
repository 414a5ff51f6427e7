import { MailServiceError } from "./errors.js";
import type { SendParams } from "./index.js";

interface Content {
  Data: string;
  /** Only "UTF-8". */
  Charset?: string;
}
export interface SendEmailCommandInput {
  FromEmailAddress: string;
  Destination: { ToAddresses?: string[]; CcAddresses?: string[]; BccAddresses?: string[] };
  Content: { Simple: { Subject: Content; Body: { Text?: Content; Html?: Content } } };
  ReplyToAddresses?: string[];
}
export interface ResponseMetadata {
  httpStatusCode?: number;
  requestId?: string;
  attempts: 1;
  totalRetryDelay: 0;
}
export interface SendEmailCommandOutput {
  MessageId: string;
  $metadata: ResponseMetadata;
}

export class SendEmailCommand {
  constructor(input: SendEmailCommandInput);
  readonly input: SendEmailCommandInput;
}

/** `name` is the service's error code (e.g. "SendingPaused"). */
export class SESv2ServiceException extends MailServiceError {
  readonly $fault: "client" | "server";
  readonly $metadata: ResponseMetadata;
}

export interface SESv2ClientConfig {
  /** The service's base URL; defaults to MAILSERVICE_BASE_URL. */
  endpoint?: string;
  /** Defaults to MAILSERVICE_API_KEY. */
  apiKey?: string;
  /** Accepted; has no effect. */
  region?: string;
  timeout?: number;
}

export class SESv2Client {
  constructor(config?: SESv2ClientConfig);
  send(command: SendEmailCommand): Promise<SendEmailCommandOutput>;
}

export function toSendRequest(input: SendEmailCommandInput): SendParams;
