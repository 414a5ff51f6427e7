export * from "./errors.js";

/** A Mailbox: `name@example.com` or `Display Name <name@example.com>`, 3 to 320 characters. */
export type Mailbox = string;
export type AddressOrList = Mailbox | Mailbox[];

export interface TemplateReference {
  id: string;
  version?: number;
  variables?: Record<string, string | number | boolean>;
}

interface SendCommon {
  from: Mailbox;
  to?: AddressOrList;
  cc?: AddressOrList;
  bcc?: AddressOrList;
  replyTo?: AddressOrList;
}
export interface InlineSendParams extends SendCommon {
  subject: string;
  text?: string;
  html?: string;
}
export interface TemplateSendParams extends SendCommon {
  template: TemplateReference;
  subject?: string;
}
export type SendParams = InlineSendParams | TemplateSendParams;

export interface SendResult {
  id: string;
  created_at: string;
}
export interface Message {
  id: string;
  domain_id: string;
  direction: "sent" | "received";
  from: string;
  to: string[];
  subject: string;
  status: "accepted" | "delivered" | "received" | "bounced" | "complained" | "failed";
  created_at: string;
  text: string | null;
}
export interface MessageList {
  data: Message[];
  has_more: boolean;
  next_cursor: string | null;
}
export interface ListOptions {
  limit?: number;
  after?: string;
  direction?: "sent" | "received";
}

export interface MailServiceOptions {
  /** Defaults to MAILSERVICE_API_KEY. */
  apiKey?: string;
  /** Defaults to MAILSERVICE_BASE_URL. */
  baseUrl?: string;
  /** Milliseconds; default 30000. */
  timeout?: number;
}

declare class Messages {
  list(options?: ListOptions): Promise<MessageList>;
  /** Every message, fetching page after page (`limit` per request) by `next_cursor`. */
  iter(options?: Omit<ListOptions, "after">): AsyncGenerator<Message, void, undefined>;
  get(id: string): Promise<Message>;
}

export class MailService {
  constructor(options?: MailServiceOptions);
  readonly messages: Messages;
  /**
   * With `idempotencyKey` (1–256 printable ASCII), retrying with the same key and params within
   * 24 hours returns the first answer instead of sending again.
   */
  send(params: SendParams, options?: SendOptions): Promise<SendResult>;
  /**
   * 1 to 500 sends in one request, all or none; resolves to each one's result in the order given.
   * A refused item is named (`messages.3.to`); `idempotencyKey` covers the whole batch.
   */
  sendBatch(messages: SendParams[], options?: SendOptions): Promise<SendResult[]>;
}

export interface SendOptions {
  idempotencyKey?: string;
}

/** Validates a native send body locally and returns it as it will be sent. */
export function toSendRequest(params: SendParams): SendParams;
