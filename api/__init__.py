"""What both sides of the session API share: its plain data types (types.py) and the
conversions between them and the proto messages (convert.py). The client SDK and the server
import this package; neither imports the other."""
