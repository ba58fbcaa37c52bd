from .main import LinkifyIt as LinkifyIt
from .main import SchemaError as SchemaError

__version__: str
