"""The TextArena games that the adapter registers as ``textarena/<game>-v0``, listed here so plugin
discovery does not import TextArena.

Each id below is a TextArena 0.7.4 registry id (without the ``-raw``/``-train`` wrapper variants,
which the adapter does not need: it formats observations itself) whose game starts with two
players and runs offline on CPython 3.11: ``reset(num_players=2)`` and steps work with no network
and no data download. Left out, and why (the error a user sees from TextArena):

- one-player games (``2048``, ``Sudoku``, ``Minesweeper``...): ``AssertionError`` on two players;
- games that load NLTK corpora at start (``Codenames``, ``Hangman``, ``Wordle``, ``WordLadder``,
  ``SpellingBee``, ``LetterAuction``, ``DontSayIt``, ``WordChains``, ``WordSearch``...):
  ``LookupError: Resource 'words' not found`` (NLTK downloads it; offline it cannot);
- games whose source needs Python 3.12 (``Chess``, ``Checkers``, ``ReverseTicTacToe``,
  ``IteratedStagHunt``, ``UltimateTexasHoldem``; ``Klondike``): ``SyntaxError: f-string``;
- games whose data files the wheel lacks (``ScorableGames``, ``UsedCarNegotiation``):
  ``FileNotFoundError``; ``BabyAiText`` needs the old ``gym`` package.
"""

from __future__ import annotations

TEXTARENA_GAMES: tuple[str, ...] = (
    'Alquerque-v0', 'Battleship-v0', 'Battleship-v0-extreme', 'Battleship-v0-large',
    'Battleship-v0-standard', 'Breakthrough-v0', 'Breakthrough-v0-blind',
    'Breakthrough-v0-large', 'Breakthrough-v0-long', 'Breakthrough-v0-small',
    'Breakthrough-v0-tiny', 'Briscola-v0', 'Chopsticks-v0', 'Chopsticks-v0-long',
    'Chopsticks-v0-medium', 'ColonelBlotto-v0', 'ColonelBlotto-v0-extreme',
    'ColonelBlotto-v0-large', 'ColonelBlotto-v0-small', 'ConnectFour-v0',
    'ConnectFour-v0-blind', 'ConnectFour-v0-large', 'Crusade-v0', 'GameOfPureStrategy-v0',
    'GermanWhist-v0', 'Golf-v0', 'Golf-v0-medium', 'HighSociety-v0', 'IndianPoker-v0',
    'IndianPoker-v0-extreme', 'IndianPoker-v0-long', 'IndianPoker-v0-medium',
    'IndianPoker-v0-short', 'IteratedMatchingPennies-v0', 'IteratedPrisonersDilemma-v0',
    'IteratedRockPaperScissors-v0', 'IteratedTwoThirdsAverage-v0', 'IteratedUltimatumGame-v0',
    'IteratedUltimatumGame-v0-alternate', 'KuhnPoker-v0', 'KuhnPoker-v0-extreme',
    'KuhnPoker-v0-long', 'KuhnPoker-v0-medium', 'KuhnPoker-v0-short', 'LiarsDice-v0',
    'LiarsDice-v0-large', 'LiarsDice-v0-small', 'LinesOfAction-v0', 'MarketEntryGame-v0',
    'MemoryGame-v0', 'MemoryGame-v0-hard', 'MemoryGame-v0-medium', 'NewRecruit-v0', 'Nim-v0',
    'Nim-v0-large', 'Nim-v0-medium', 'Othello-v0', 'Othello-v0-big', 'Othello-v0-hard',
    'Othello-v0-huge', 'Othello-v0-small', 'Othello-v0-tiny', 'PigDice-v0', 'PigDice-v0-100',
    'PigDice-v0-150', 'PigDice-v0-200', 'PigDice-v0-250', 'PigDice-v0-300', 'PigDice-v0-350',
    'PigDice-v0-400', 'PigDice-v0-450', 'PigDice-v0-50', 'PigDice-v0-500', 'PigDice-v0-long',
    'PigDice-v0-short', 'Poker-v0', 'Poker-v0-extreme', 'Poker-v0-long', 'Poker-v0-small',
    'PublicGoodsGame-v0', 'QuantumTicTacToe-v0', 'SantoriniBaseFixed-v0',
    'SimpleBlindAuction-v0', 'SimpleBlindAuction-v0-quick', 'SimpleBlindAuction-v0-rich',
    'SimpleNegotiation-v0', 'SimpleNegotiation-v0-long', 'SimpleNegotiation-v0-short',
    'SimpleTak-v0', 'SimpleTak-v0-extreme', 'SimpleTak-v0-large', 'SimpleTak-v0-medium',
    'Snake-v0', 'Snake-v0-large', 'Snake-v0-standard', 'SpiteAndMalice-v0', 'Stratego-v0',
    'Surround-v0', 'Surround-v0-large', 'Surround-v0-standard', 'Tak-v0', 'Tak-v0-hard',
    'Tak-v0-medium', 'TicTacToe-v0', 'TruthAndDeception-v0', 'TruthAndDeception-v0-extreme',
    'TruthAndDeception-v0-long', 'TwoDollar-v0', 'UltimateTicTacToe-v0', 'WildTicTacToe-v0',
)
