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
/**
 * Why a receiver refused or deferred a message (webhooks' `reason`; the service's docs/webhooks.md says
 * what each does): the first three suppress the address, the next four are the sender's to fix.
 */
export type RefusalReason =
  | "user_unknown"
  | "mailbox_disabled"
  | "domain_not_found"
  | "blocked"
  | "spam_detected"
  | "authentication"
  | "policy"
  | "mailbox_full"
  | "host_unreachable"
  | "content_rejected"
  | "rate_limited"
  | "greylisted"
  | "expired"
  | "other";
/** `data` of an email.delayed, email.bounced or email.failed webhook: the message and the event's fields. */
export interface WebhookFailureData extends Message {
  recipient?: string;
  bounce_type?: "hard" | "soft";
  status_code?: string;
  diagnostic?: string;
  smtp_response?: string;
  reason?: RefusalReason;
  cause?: "authentication" | "reputation" | "rate_limited" | "policy" | "mailbox" | "other";
  fix_check?: "spf" | "dkim" | "dmarc" | "alignment" | "ptr";
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

export type SuppressionReason = "hard_bounce" | "soft_bounce" | "complaint" | "manual";
export interface Suppression {
  /** The bare address, lower-case, as the list compares it. */
  email: string;
  reason: SuppressionReason;
  created_at: string;
  expires_at: string | null;
  /** The message whose report caused it. */
  message_id: string | null;
  detail: string;
}
export interface SuppressionList {
  data: Suppression[];
  has_more: boolean;
  next_cursor: string | null;
}
export interface SuppressionListOptions {
  limit?: number;
  after?: string;
  reason?: SuppressionReason;
  email?: string;
}

export type EventType =
  | "email.accepted"
  | "email.delivered"
  | "email.delayed"
  | "email.bounced"
  | "email.complained"
  | "email.failed"
  | "email.suppressed"
  | "email.received";
/** Exactly a webhook's body: `id` is its webhook-id; `data` the message plus the event's own fields. */
export interface Event {
  type: EventType;
  id: string;
  created_at: string;
  test: boolean;
  data: Record<string, unknown>;
}
export interface EventList {
  data: Event[];
  has_more: boolean;
  next_cursor: string | null;
}
export interface EventListOptions {
  limit?: number;
  after?: string;
  types?: EventType[];
  since?: string | Date;
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

declare class Suppressions {
  list(options?: SuppressionListOptions): Promise<SuppressionList>;
  /** Every suppression, newest first, fetching page after page. */
  iter(options?: Omit<SuppressionListOptions, "after" | "email">): AsyncGenerator<Suppression, void, undefined>;
  get(email: string): Promise<Suppression>;
  /** A `manual` suppression (suppressions.write); an existing one resolves unchanged. */
  add(email: string, options?: { detail?: string }): Promise<Suppression>;
  remove(email: string): Promise<void>;
}

export class MailService {
  constructor(options?: MailServiceOptions);
  readonly messages: Messages;
  readonly suppressions: Suppressions;
  /** Every event of a message, oldest first, each exactly its webhook's body. */
  messageEvents(id: string): Promise<Event[]>;
  eventsPage(options?: EventListOptions): Promise<EventList>;
  /** The domain's events, oldest first, fetching page after page. */
  events(options?: EventListOptions): AsyncGenerator<Event, void, undefined>;
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
