"""Worker processes and the pools that hand them units: local (fork server or spawn) and Ray; nothing here knows what a case computes."""
