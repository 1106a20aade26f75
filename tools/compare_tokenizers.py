"""`pretrain experiment compare_tokenizers`: Which tokenizer?"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "compare_tokenizers", *sys.argv[1:]]))
