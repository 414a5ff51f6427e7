import type { SendParams } from "./index.js";

export interface Message {
  From: string;
  /** Comma-separated addresses, 3 to 16000 characters. */
  To: string;
  Cc?: string;
  Bcc?: string;
  ReplyTo?: string;
  Subject?: string;
  TextBody?: string;
  HtmlBody?: string;
  /** Only "outbound". */
  MessageStream?: "outbound";
}
export interface MessageSendingResponse {
  To: string;
  SubmittedAt: string;
  MessageID: string;
  ErrorCode: 0;
  Message: "OK";
}
export interface ClientOptions {
  /** The service's base URL; defaults to MAILSERVICE_BASE_URL. */
  baseUrl?: string;
  timeout?: number;
}

export class ServerClient {
  /** `serverToken` is the service's API key; defaults to MAILSERVICE_API_KEY. */
  constructor(serverToken?: string, options?: ClientOptions);
  sendEmail(message: Message): Promise<MessageSendingResponse>;
}
export { ServerClient as Client };

export function toSendRequest(message: Message): SendParams;
