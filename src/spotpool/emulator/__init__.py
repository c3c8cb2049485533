"""A local Tencent Cloud API 3.0 emulator (CVM with spot). Imports nothing of the project."""
