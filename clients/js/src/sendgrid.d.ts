import type { SendParams } from "./index.js";

/** A Mailbox string or `{ email, name }`. */
export type EmailData = string | { email: string; name?: string };
export interface MailDataRequired {
  from: EmailData;
  to: EmailData | EmailData[];
  cc?: EmailData | EmailData[];
  bcc?: EmailData | EmailData[];
  replyTo?: EmailData;
  subject: string;
  text?: string;
  html?: string;
}
export interface ClientResponse {
  statusCode: 202;
  headers: Record<string, string> & { "x-message-id": string };
  body: "";
}

export class MailService {
  /** Defaults to MAILSERVICE_API_KEY. */
  setApiKey(apiKey: string): void;
  /** The service's base URL; defaults to MAILSERVICE_BASE_URL. */
  setBaseUrl(baseUrl: string): void;
  send(msg: MailDataRequired): Promise<[ClientResponse, ""]>;
}

declare const mail: MailService;
export default mail;

export function toSendRequest(msg: MailDataRequired): SendParams;
